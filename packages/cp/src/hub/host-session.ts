import {
  decodeBinaryData,
  encodeBinaryHeader,
  type Frame,
  type HelloFrame,
  PROTOCOL_VERSION,
  parseFrame,
  type RawFrame,
} from "@denv/spec";
import type { WebSocket } from "ws";
import { StreamTable } from "./streams.js";

/** Handlers the hub gives a session for the frames that concern commands. */
export interface SessionHandlers {
  hello(session: HostSession, hello: HelloFrame): Promise<void>;
  frame(session: HostSession, frame: Exclude<Frame, { type: "hello" }>): void;
  closed(session: HostSession, reason: string): void;
}

/** WebSocket close code for a protocol violation (RFC 6455 1008). */
const POLICY_VIOLATION = 1008;

/**
 * One connection of one host: parses and validates every frame (spec's parseFrame, or
 * decodeBinaryData for a binary data frame), insists on `hello` first, routes data frames to its
 * streams, and tells the hub the rest. Data frames go to the host as binary messages once its
 * hello said it takes them; the answer to every hello is a heartbeat saying this control plane
 * takes them too.
 */
export class HostSession {
  readonly streams: StreamTable;
  lastSeen = Date.now();
  private helloSeen = false;
  /** The host's hello said it takes binary data frames. */
  private binaryData = false;
  private closedReason: string | undefined;

  constructor(
    readonly hostId: string,
    private readonly socket: WebSocket,
    private readonly handlers: SessionHandlers,
  ) {
    this.streams = new StreamTable((f) => this.send(f));
    // A binary data frame arrives as its fragments (header, bytes): relayed without a copy.
    socket.binaryType = "fragments";
    socket.on("message", (data, isBinary) => this.receive(isBinary ? (data as Buffer[]) : data.toString()));
    socket.on("close", () => this.onClose("the connection closed"));
    socket.on("error", (err) => this.onClose(`socket error: ${err.message}`));
  }

  get isOpen(): boolean {
    return this.closedReason === undefined;
  }

  send(frame: RawFrame): void {
    if (!this.isOpen || this.socket.readyState !== this.socket.OPEN) return;
    if (frame.type !== "data") {
      this.socket.send(JSON.stringify(frame));
      return;
    }
    const header = this.binaryData ? encodeBinaryHeader(frame) : undefined;
    if (header) {
      // One message in two fragments, header and bytes: the bytes go out as they came in.
      this.socket.send(header, { binary: true, fin: false });
      this.socket.send(frame.data, { binary: true, fin: true });
    } else {
      const { data } = frame;
      const base64 = Buffer.from(data.buffer, data.byteOffset, data.byteLength).toString("base64");
      this.socket.send(JSON.stringify({ ...frame, data: base64 }));
    }
  }

  /** Closes the connection; `violation` uses the protocol-violation close code. */
  close(reason: string, violation = false): void {
    if (!this.isOpen) return;
    this.socket.close(violation ? POLICY_VIOLATION : 1000, reason.slice(0, 120));
    // A peer that does not answer the close handshake is cut off.
    setTimeout(() => this.socket.terminate(), 1_000).unref();
    this.onClose(reason);
  }

  /** Cuts the connection at once (a host that stopped answering). */
  terminate(reason: string): void {
    this.socket.terminate();
    this.onClose(reason);
  }

  private receive(message: string | Buffer[]): void {
    if (!this.isOpen) return;
    this.lastSeen = Date.now();
    let frame: RawFrame;
    try {
      frame = typeof message === "string" ? withBytes(parseFrame(message)) : decodeBinaryData(message);
    } catch (err) {
      this.close(err instanceof Error ? err.message : String(err), true);
      return;
    }
    if (frame.type === "hello") {
      if (frame.host_id !== this.hostId) {
        this.close(
          `protocol: hello names host ${frame.host_id}, the credential is host ${this.hostId}`,
          true,
        );
        return;
      }
      // Results may follow the hello at once (commands that finished while the host was away),
      // so frames are handled from here on even while the hello's reconciliation runs.
      this.helloSeen = true;
      this.binaryData = frame.capabilities?.binary_data === true;
      // What this control plane takes, before anything else goes to the host: an older host
      // ignores the field and keeps to JSON.
      this.send({
        v: PROTOCOL_VERSION,
        type: "heartbeat",
        ts: Date.now(),
        capabilities: { binary_data: true },
      });
      this.handlers
        .hello(this, frame)
        .catch((err: unknown) =>
          this.close(`hello failed: ${err instanceof Error ? err.message : String(err)}`),
        );
      return;
    }
    if (!this.helloSeen) {
      if (frame.type !== "heartbeat") this.close("protocol: the first frame must be hello", true);
      return;
    }
    if (frame.type === "command" || frame.type === "cancel") {
      this.close(`protocol: ${frame.type} frames go from the control plane to hosts`, true);
      return;
    }
    if (frame.type === "data" || frame.type === "window" || frame.type === "end") {
      this.streams.route(frame);
      return;
    }
    this.handlers.frame(this, frame);
  }

  private onClose(reason: string): void {
    if (!this.isOpen) return;
    this.closedReason = reason;
    this.streams.failAll(reason);
    this.handlers.closed(this, reason);
  }
}

/** A JSON frame as the cp holds it: a data frame's base64 decoded. */
function withBytes(frame: Frame): RawFrame {
  return frame.type === "data" ? { ...frame, data: Buffer.from(frame.data, "base64") } : frame;
}
