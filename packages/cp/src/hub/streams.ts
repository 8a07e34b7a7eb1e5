import { Readable } from "node:stream";
import {
  BULK_WINDOW,
  INITIAL_WINDOW,
  MAX_BULK_CHUNK,
  MAX_DATA_CHUNK,
  PROTOCOL_VERSION,
  type RawDataFrame,
  type RawFrame,
} from "@denv/spec";

/**
 * Data streams over a host's socket, credit based in both directions: a writer may have at most
 * the bytes its reader granted in flight (INITIAL_WINDOW to start, more with `window` frames),
 * and the cp grants more only as its own consumer (an HTTP response, a client WebSocket) drains.
 * So a slow client slows the host, and no stream ever holds more than one window here. A bulk
 * stream (a version transfer) has a window of BULK_WINDOW and frames of up to MAX_BULK_CHUNK;
 * the others keep INITIAL_WINDOW and MAX_DATA_CHUNK.
 */

export type Channel = RawDataFrame["channel"];
export type SendFrame = (frame: RawFrame) => void;

export interface Chunk {
  channel: Channel;
  data: Buffer;
}

/** Grants below this wait for more room, so a fast consumer does not cost a frame per read. */
const GRANT_THRESHOLD = Math.min(MAX_DATA_CHUNK, INITIAL_WINDOW / 4);

/**
 * Bytes from a host, as an object-mode Readable of {channel, data}. Chunks wait in a queue of
 * our own and are handed to the Readable one at a time, so `buffered` is exact.
 */
export class InboundStream extends Readable {
  private granted = INITIAL_WINDOW;
  private received = 0;
  private consumed = 0;
  private nextSeq = 0;
  private queue: Chunk[] = [];
  private wanted = false;
  private ended = false;
  /** Grants below this wait (a bulk window grants in larger steps). */
  private readonly threshold: number;
  /** Largest number of bytes this stream ever held (tests assert it stays within a window). */
  maxBuffered = 0;

  constructor(
    readonly id: string,
    private readonly send: SendFrame,
    /** What the host may have in flight plus what waits here: at least INITIAL_WINDOW. */
    readonly window = INITIAL_WINDOW,
  ) {
    super({ objectMode: true, highWaterMark: 1 });
    this.threshold = window > INITIAL_WINDOW ? window / 8 : GRANT_THRESHOLD;
    // The rest of a larger window at once (the host's stream exists on first sight of a frame).
    if (window > INITIAL_WINDOW) {
      this.granted = window;
      send({ v: PROTOCOL_VERSION, type: "window", stream: id, bytes: window - INITIAL_WINDOW });
    }
  }

  get buffered(): number {
    return this.received - this.consumed;
  }

  accept(frame: RawDataFrame): void {
    if (this.ended || this.destroyed) return;
    if (frame.seq !== this.nextSeq) {
      this.fail(`stream ${this.id}: data frame ${frame.seq} arrived where ${this.nextSeq} was expected`);
      return;
    }
    this.nextSeq++;
    const data = Buffer.from(frame.data.buffer, frame.data.byteOffset, frame.data.byteLength);
    if (data.length > MAX_BULK_CHUNK) {
      this.fail(`stream ${this.id}: a data frame of ${data.length} bytes, more than ${MAX_BULK_CHUNK}`);
      return;
    }
    this.received += data.length;
    if (this.received > this.granted) {
      this.fail(`stream ${this.id}: the host sent ${this.received - this.granted} bytes beyond its window`);
      return;
    }
    this.maxBuffered = Math.max(this.maxBuffered, this.buffered);
    this.queue.push({ channel: frame.channel, data });
    if (this.wanted) this.handOver();
  }

  /** The host's `end` frame for its direction. */
  finish(error?: string): void {
    if (this.ended || this.destroyed) return;
    if (error !== undefined) {
      this.fail(`stream ${this.id}: ${error}`);
      return;
    }
    this.ended = true;
    if (this.wanted) this.handOver();
  }

  fail(message: string): void {
    this.ended = true;
    this.queue = [];
    this.destroy(new Error(message));
  }

  override _read(): void {
    this.wanted = true;
    this.handOver();
  }

  private handOver(): void {
    const next = this.queue.shift();
    if (next) {
      this.wanted = false;
      this.consumed += next.data.length;
      this.push(next);
      this.grantRoom();
    } else if (this.ended) {
      this.wanted = false;
      this.push(null);
    }
  }

  private grantRoom(): void {
    // What the host may still send plus what waits here stays within one window.
    const outstanding = this.granted - this.received;
    const room = this.window - outstanding - this.buffered;
    if (room <= 0) return;
    if (room >= this.threshold || outstanding < this.threshold) {
      this.granted += room;
      this.send({ v: PROTOCOL_VERSION, type: "window", stream: this.id, bytes: room });
    }
  }
}

/**
 * Bytes to a host. `write` resolves once the chunk went out within the host's credit, so a
 * producer that awaits it (a request body, a client socket) never gets ahead of the host.
 */
export class OutboundStream {
  private credit = INITIAL_WINDOW;
  private seq = 0;
  private closed = false;
  private waiter: { resolve: () => void; reject: (err: Error) => void } | undefined;
  /** Bytes sent beyond the granted credit: must stay 0 (tests assert it). */
  sentBytes = 0;

  constructor(
    readonly id: string,
    private readonly send: SendFrame,
    /** Largest payload of one frame. */
    private readonly chunk = MAX_DATA_CHUNK,
  ) {}

  grant(bytes: number): void {
    this.credit += bytes;
    const w = this.waiter;
    this.waiter = undefined;
    w?.resolve();
  }

  async write(channel: Channel, data: Buffer): Promise<void> {
    let rest = data;
    while (rest.length > 0) {
      if (this.closed) throw new Error(`stream ${this.id} is closed`);
      if (this.credit <= 0) {
        await new Promise<void>((resolve, reject) => {
          this.waiter = { resolve, reject };
        });
        continue;
      }
      const n = Math.min(rest.length, this.credit, this.chunk);
      this.credit -= n;
      this.sentBytes += n;
      this.send({
        v: PROTOCOL_VERSION,
        type: "data",
        stream: this.id,
        seq: this.seq++,
        channel,
        data: rest.subarray(0, n),
      });
      rest = rest.subarray(n);
    }
  }

  /** Ends this direction (with an error, the reader fails its side). */
  end(error?: string): void {
    if (this.closed) return;
    this.send({
      v: PROTOCOL_VERSION,
      type: "end",
      stream: this.id,
      error,
    });
    this.drop(new Error(`stream ${this.id} ended`));
  }

  /** Forgets the stream without a frame (the connection is gone or the command is over). */
  drop(reason: Error): void {
    this.closed = true;
    const w = this.waiter;
    this.waiter = undefined;
    w?.reject(reason);
  }

  /** Copies a byte Readable into the stream (awaiting credit per chunk), then ends it. */
  async pump(source: AsyncIterable<Buffer | string>, channel: Channel): Promise<void> {
    try {
      for await (const chunk of source) {
        await this.write(channel, typeof chunk === "string" ? Buffer.from(chunk) : chunk);
      }
      this.end();
    } catch (err) {
      this.end(err instanceof Error ? err.message : String(err));
      throw err;
    }
  }
}

/** The open streams of one host session. A stream id names both directions. */
export class StreamTable {
  private inbound = new Map<string, InboundStream>();
  private outbound = new Map<string, OutboundStream>();

  constructor(private readonly send: SendFrame) {}

  /** `bulk`: a version transfer's stream, with a window of BULK_WINDOW. */
  openInbound(id: string, opts: { bulk?: boolean } = {}): InboundStream {
    const s = new InboundStream(id, this.send, opts.bulk ? BULK_WINDOW : INITIAL_WINDOW);
    // A consumer that gave up must not turn a late error into an unhandled one.
    s.on("error", () => undefined);
    s.on("close", () => this.inbound.delete(id));
    this.inbound.set(id, s);
    return s;
  }

  /** `bulk`: a version transfer's stream, in frames of up to MAX_BULK_CHUNK. */
  openOutbound(id: string, opts: { bulk?: boolean } = {}): OutboundStream {
    const s = new OutboundStream(id, this.send, opts.bulk ? MAX_BULK_CHUNK : MAX_DATA_CHUNK);
    this.outbound.set(id, s);
    return s;
  }

  /** Routes a data, window or end frame; frames of unknown streams are dropped (late frames). */
  route(frame: Extract<RawFrame, { type: "data" | "window" | "end" }>): void {
    if (frame.type === "data") this.inbound.get(frame.stream)?.accept(frame);
    else if (frame.type === "window") this.outbound.get(frame.stream)?.grant(frame.bytes);
    else this.inbound.get(frame.stream)?.finish(frame.error);
  }

  close(id: string, reason = `stream ${id} closed`): void {
    const i = this.inbound.get(id);
    if (i && !i.readableEnded) i.fail(reason);
    this.inbound.delete(id);
    this.outbound.get(id)?.drop(new Error(reason));
    this.outbound.delete(id);
  }

  failAll(reason: string): void {
    for (const id of [...this.inbound.keys(), ...this.outbound.keys()])
      this.close(id, `stream ${id}: ${reason}`);
  }
}
