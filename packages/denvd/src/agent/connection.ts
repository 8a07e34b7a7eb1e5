import { createRequire } from "node:module";
import {
  decodeBinaryData,
  encodeBinaryHeader,
  type Frame,
  HEARTBEAT_MS,
  MISSED_HEARTBEATS_OFFLINE,
  PROTOCOL_VERSION,
  parseFrame,
  type RawFrame,
} from "@denv/spec/protocol/frames";
import type WsClient from "ws";
import type { Log } from "./log.js";

/**
 * ws is CommonJS, so it is required rather than imported: importing it from ESM makes Node run
 * its CommonJS export lexer over ws's sources, and V8 optimizes the lexer, which costs an idle
 * denvd about 4 MB (README, "Memory").
 */
const WebSocket = createRequire(import.meta.url)("ws") as typeof WsClient;
type WebSocket = WsClient;

/**
 * The socket to the control plane: denvd dials out (hosts take no inbound connections), keeps
 * the socket alive with heartbeats, and dials again with capped exponential backoff and jitter
 * whenever it drops. What flows over it is the Agent's business (agent.ts).
 */

export interface Backoff {
  initialMs: number;
  maxMs: number;
}

const DEFAULT_BACKOFF: Backoff = { initialMs: 500, maxMs: 30_000 };

/** A connection that lasted this long was healthy: the next drop starts the backoff over. */
const HEALTHY_MS = 30_000;

/**
 * "Equal jitter": half the exponential step, plus a random half. Never zero (no hot loop when
 * the control plane refuses at once) and never in lockstep with the other hosts of a fleet.
 */
export function backoffDelay(attempt: number, b: Backoff, random: () => number = Math.random): number {
  const ceiling = Math.min(b.maxMs, b.initialMs * 2 ** Math.min(attempt, 30));
  return Math.round(ceiling / 2 + (random() * ceiling) / 2);
}

/** http(s)://cp/base -> ws(s)://cp/base/v1/hosts/stream */
export function streamUrl(base: string): string {
  const u = new URL(base);
  u.protocol = u.protocol === "https:" ? "wss:" : "ws:";
  u.pathname = `${u.pathname.replace(/\/+$/, "")}/v1/hosts/stream`;
  return u.toString();
}

export interface ConnectionHandlers {
  /**
   * The socket is open: send hello. `send` writes to this socket only (false once it closed);
   * `sent` is called once the frame was written out (or could not be).
   */
  onOpen(send: (frame: RawFrame, sent?: () => void) => boolean): void;
  /** A frame from the control plane; a data frame's bytes are decoded (from base64 or binary). */
  onFrame(frame: RawFrame): void;
  /** The socket closed (it will be dialled again unless stopped). */
  onClose(reason: string): void;
}

export interface ConnectionOptions {
  url: string;
  /** Sent as `Authorization: Bearer`; never logged. */
  credential: string;
  log: Log;
  handlers: ConnectionHandlers;
  heartbeatMs?: number;
  backoff?: Backoff;
}

/** The largest frame accepted: a command with inline exec stdin is the big one. */
const MAX_FRAME_BYTES = 64 * 1024 * 1024;

/** WebSocket close code for a protocol violation (RFC 6455 1008). */
const POLICY_VIOLATION = 1008;

/** What this connection's control plane said it understands (its first heartbeat). */
interface Peer {
  binaryData: boolean;
}

export class Connection {
  private ws: WebSocket | undefined;
  private stopped = false;
  private attempt = 0;
  private openedAt = 0;
  private lastHeard = 0;
  private retry: NodeJS.Timeout | undefined;
  private beat: NodeJS.Timeout | undefined;
  private readonly heartbeatMs: number;
  private readonly backoff: Backoff;

  constructor(private readonly o: ConnectionOptions) {
    this.heartbeatMs = o.heartbeatMs ?? HEARTBEAT_MS;
    this.backoff = o.backoff ?? DEFAULT_BACKOFF;
  }

  start(): void {
    this.dial();
  }

  /** Closes the socket for good (a clean close: the control plane knows the host left). */
  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.retry);
    clearInterval(this.beat);
    const ws = this.ws;
    if (!ws || ws.readyState === WebSocket.CLOSED) return;
    const closed = new Promise<void>((resolve) => ws.once("close", () => resolve()));
    if (ws.readyState === WebSocket.CONNECTING) ws.terminate();
    else ws.close(1001, "denvd is shutting down");
    const timer = setTimeout(() => ws.terminate(), 2_000);
    await closed;
    clearTimeout(timer);
  }

  private dial(): void {
    if (this.stopped) return;
    const url = streamUrl(this.o.url);
    const ws = new WebSocket(url, {
      headers: { Authorization: `Bearer ${this.o.credential}` },
      handshakeTimeout: 10_000,
      maxPayload: MAX_FRAME_BYTES,
      perMessageDeflate: false,
      generateMask: unmasked,
    });
    this.ws = ws;
    // A binary data frame arrives as its fragments (header, bytes): no copy to join them.
    ws.binaryType = "fragments";
    let wasOpen = false;
    // Binary data frames only once this control plane said it takes them: an older one would
    // close the connection at the first.
    const peer: Peer = { binaryData: false };
    ws.on("unexpected-response", (req, res) => {
      // The control plane answered the upgrade with an error (401: a revoked or unknown
      // credential). Say what it said; keep dialling, capped: an operator may fix it.
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (c: string) => {
        if (body.length < 4096) body += c;
      });
      res.on("end", () => {
        this.o.log("connect refused", { url, status: res.statusCode, message: errorMessage(body) });
        req.destroy();
        ws.terminate();
      });
    });
    ws.on("open", () => {
      wasOpen = true;
      this.openedAt = Date.now();
      this.lastHeard = Date.now();
      this.o.log("connected", { url });
      this.beat = setInterval(() => this.heartbeat(), this.heartbeatMs);
      this.o.handlers.onOpen((frame, sent) => sendOn(ws, frame, peer, sent));
    });
    ws.on("message", (data, isBinary) => {
      this.lastHeard = Date.now();
      if (isBinary) {
        let frame: RawFrame;
        try {
          frame = decodeBinaryData(data as Buffer[]);
        } catch (err) {
          // A data frame lost would leave its stream short without a word: the connection goes,
          // and every stream with it.
          this.o.log("frame refused", { reason: errorText(err) });
          ws.close(POLICY_VIOLATION, errorText(err).slice(0, 120));
          return;
        }
        this.o.handlers.onFrame(frame);
        return;
      }
      let frame: Frame;
      try {
        frame = parseFrame(data.toString());
      } catch (err) {
        this.o.log("frame dropped", { reason: errorText(err) });
        return;
      }
      if (frame.type === "heartbeat") {
        if (frame.capabilities?.binary_data && !peer.binaryData) {
          peer.binaryData = true;
          this.o.log("binary data frames", { reason: "the control plane takes them" });
        }
        return;
      }
      this.o.handlers.onFrame(
        frame.type === "data" ? { ...frame, data: Buffer.from(frame.data, "base64") } : frame,
      );
    });
    ws.on("error", (err) => {
      if (!wasOpen) this.o.log("connect failed", { url, error: err.message });
      else this.o.log("socket error", { error: err.message });
    });
    ws.on("close", (code, reason) => {
      clearInterval(this.beat);
      if (this.ws === ws) this.ws = undefined;
      if (wasOpen) {
        const why = reason.toString() || `code ${code}`;
        this.o.log("disconnected", { reason: why });
        this.o.handlers.onClose(why);
        if (Date.now() - this.openedAt >= HEALTHY_MS) this.attempt = 0;
      }
      if (this.stopped) return;
      const delay = backoffDelay(this.attempt++, this.backoff);
      this.o.log("reconnecting", { in_ms: delay });
      this.retry = setTimeout(() => this.dial(), delay);
    });
  }

  private heartbeat(): void {
    const ws = this.ws;
    if (!ws) return;
    if (Date.now() - this.lastHeard > MISSED_HEARTBEATS_OFFLINE * this.heartbeatMs) {
      // A half-open TCP connection looks open forever: only silence tells.
      this.o.log("control plane silent", { missed: MISSED_HEARTBEATS_OFFLINE });
      ws.terminate();
      return;
    }
    sendOn(ws, { v: PROTOCOL_VERSION, type: "heartbeat", ts: Date.now() });
  }
}

function sendOn(
  ws: WebSocket,
  frame: RawFrame,
  peer: Peer = { binaryData: false },
  sent?: () => void,
): boolean {
  if (ws.readyState !== WebSocket.OPEN) {
    sent?.();
    return false;
  }
  const done = sent ? () => sent() : undefined;
  if (frame.type !== "data") {
    ws.send(JSON.stringify(frame), done);
    return true;
  }
  const header = peer.binaryData ? encodeBinaryHeader(frame) : undefined;
  if (header) sendFragments(ws, header, frame.data, done);
  else ws.send(JSON.stringify({ ...frame, data: base64(frame.data) }), done);
  return true;
}

/**
 * One binary message in two fragments, its header and its bytes, so that the bytes go out as
 * they are (the two sends are one message: nothing can come between them).
 */
function sendFragments(ws: WebSocket, header: Uint8Array, bytes: Uint8Array, done?: () => void): void {
  ws.send(header, { binary: true, fin: false });
  ws.send(bytes, { binary: true, fin: true }, done);
}

/**
 * A zero masking key: ws then neither masks what denvd sends nor does the control plane unmask
 * it, which saves a copy and a pass over every byte of a version transfer on both sides.
 * Masking (RFC 6455 section 10.3) keeps a browser's script from choosing the bytes a proxy in
 * the middle sees; denvd is no browser, and its link is TLS unless `--insecure` says the
 * network between it and the control plane is trusted, where every byte is in the clear anyway.
 */
function unmasked(mask: Buffer): void {
  mask.fill(0);
}

function base64(bytes: Uint8Array): string {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("base64");
}

function errorMessage(body: string): string {
  try {
    const parsed = JSON.parse(body) as { error?: { message?: string } };
    return parsed.error?.message ?? body.slice(0, 300);
  } catch {
    return body.slice(0, 300);
  }
}

export function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
