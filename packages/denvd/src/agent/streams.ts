import type { RawFrame } from "@denv/spec/protocol/frames";
import { InboundStream } from "./inbound-stream.js";
import { OutboundStream } from "./outbound-stream.js";
import type { SendFrame } from "./send-frame.js";

/**
 * Data streams over the control plane socket (exec stdin/stdout/stderr, file transfer, deploy
 * source, TCP tunnels). Flow control is credit based, as in HTTP/2: a writer may have at most
 * the bytes its reader granted in flight (INITIAL_WINDOW to start, more with `window` frames),
 * and a reader grants more only as its consumer drains. So a slow reader on either side slows
 * the writer and memory stays bounded by the window on both ends. A bulk stream (a version
 * transfer) gets a larger window from its reader (`widen`) and larger chunks from its writer
 * (`bulk`); the others keep INITIAL_WINDOW and MAX_DATA_CHUNK.
 */

// agent.ts and the stream tests take these from here, beside the registry that makes them.
export { InboundStream } from "./inbound-stream.js";
export { OutboundStream } from "./outbound-stream.js";
export type { SendFrame } from "./send-frame.js";

const CLOSED_REMEMBERED = 10_000;

interface StreamPair {
  inbound: InboundStream;
  outbound: OutboundStream;
}

/**
 * The open streams of one connection, by id. A stream id names both directions (exec: stdin in,
 * stdout/stderr out). A stream may see frames before its command is handled (the command is
 * journalled first), so an entry is made on first sight; the window bounds what it can hold.
 */
export class StreamRegistry {
  private streams = new Map<string, StreamPair>();
  private closed = new Set<string>();

  constructor(private readonly send: SendFrame) {}

  open(id: string): StreamPair {
    let pair = this.streams.get(id);
    if (!pair) {
      pair = { inbound: new InboundStream(id, this.send), outbound: new OutboundStream(id, this.send) };
      // A consumer that gave up must not turn a late frame into an unhandled error.
      pair.inbound.on("error", () => undefined);
      this.streams.set(id, pair);
    }
    return pair;
  }

  /** Routes a data, window or end frame; frames of a closed stream are dropped. */
  route(frame: Extract<RawFrame, { type: "data" | "window" | "end" }>): void {
    if (this.closed.has(frame.stream)) return;
    const pair = this.open(frame.stream);
    if (frame.type === "data") pair.inbound.accept(frame);
    else if (frame.type === "window") pair.outbound.grant(frame.bytes);
    else pair.inbound.finish(frame.error);
  }

  /** The stream is open (not closed by its command, nor failed with the connection). */
  has(id: string): boolean {
    return this.streams.has(id);
  }

  /** Forgets a stream once its command is done with it. */
  close(id: string): void {
    const pair = this.streams.get(id);
    this.closed.add(id);
    // Late frames of old streams are rare: remembering the recent ids is enough.
    if (this.closed.size > CLOSED_REMEMBERED) {
      for (const old of this.closed) {
        this.closed.delete(old);
        break;
      }
    }
    this.streams.delete(id);
    if (!pair) return;
    if (!pair.inbound.readableEnded) pair.inbound.fail(`stream ${id} closed`);
    pair.outbound.drop();
  }

  /** The connection dropped: every stream fails, and their commands with them. */
  failAll(reason: string): void {
    for (const [id, pair] of this.streams) {
      pair.inbound.fail(`stream ${id}: ${reason}`);
      pair.outbound.drop();
    }
    this.streams.clear();
    this.closed.clear();
  }
}
