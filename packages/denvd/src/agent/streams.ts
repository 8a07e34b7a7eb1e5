import { EventEmitter } from "node:events";
import { Readable, Writable } from "node:stream";
import {
  INITIAL_WINDOW,
  MAX_BULK_CHUNK,
  MAX_DATA_CHUNK,
  PROTOCOL_VERSION,
  type RawDataFrame,
  type RawFrame,
} from "@denv/spec/protocol/frames";

/**
 * Data streams over the control plane socket (exec stdin/stdout/stderr, file transfer, deploy
 * source, TCP tunnels). Flow control is credit based, as in HTTP/2: a writer may have at most
 * the bytes its reader granted in flight (INITIAL_WINDOW to start, more with `window` frames),
 * and a reader grants more only as its consumer drains. So a slow reader on either side slows
 * the writer and memory stays bounded by the window on both ends. A bulk stream (a version
 * transfer) gets a larger window from its reader (`widen`) and larger chunks from its writer
 * (`bulk`); the others keep INITIAL_WINDOW and MAX_DATA_CHUNK.
 */

/**
 * Sends a frame on the current connection (false: there is none). `sent`, when given, is called
 * once the frame's bytes have left this process or will never leave: a writer may then reuse
 * the buffer they were in.
 */
export type SendFrame = (frame: RawFrame, sent?: () => void) => boolean;
type Channel = RawDataFrame["channel"];

/** Grants smaller than this wait, so that a fast consumer does not cause a frame per read. */
const GRANT_THRESHOLD = Math.min(MAX_DATA_CHUNK, INITIAL_WINDOW / 4);

/**
 * Bytes from the control plane, as a Readable. Received chunks wait in a queue of our own (at
 * most the window, by the writer's credit) and move into the Readable only when its consumer
 * asks (_read); what moved is granted back to the writer. Granting on consumption, not on
 * arrival, is what lets a slow consumer slow the writer down.
 */
export class InboundStream extends Readable {
  private queue: Buffer[] = [];
  private granted: number;
  private window: number;
  /** Grants below this wait (a wider window grants in larger steps). */
  private threshold = GRANT_THRESHOLD;
  private received = 0;
  private pulled = 0;
  private nextSeq = 0;
  private wanted = false;
  private ended = false;
  private finished = false;

  constructor(
    readonly id: string,
    private readonly send: SendFrame,
    window = INITIAL_WINDOW,
  ) {
    // A small buffer inside the Readable: the queue and the window do the bounding.
    super({ highWaterMark: MAX_DATA_CHUNK });
    this.granted = window;
    this.window = window;
  }

  /** Grants the writer the difference at once: it may then have `window` bytes in flight. */
  widen(window: number): void {
    if (window <= this.window || this.finished) return;
    const more = window - this.window;
    this.window = window;
    this.threshold = window / 8;
    this.granted += more;
    this.send({ v: PROTOCOL_VERSION, type: "window", stream: this.id, bytes: more });
  }

  /** Bytes received so far. */
  get bytes(): number {
    return this.received;
  }

  accept(frame: RawDataFrame): void {
    if (this.finished || this.ended) return;
    if (frame.seq !== this.nextSeq) {
      this.fail(`stream ${this.id}: data frame ${frame.seq} arrived, ${this.nextSeq} was expected`);
      return;
    }
    this.nextSeq++;
    const chunk = Buffer.from(frame.data.buffer, frame.data.byteOffset, frame.data.byteLength);
    if (chunk.length > MAX_BULK_CHUNK) {
      this.fail(`stream ${this.id}: a data frame of ${chunk.length} bytes, more than ${MAX_BULK_CHUNK}`);
      return;
    }
    this.received += chunk.length;
    if (this.received > this.granted) {
      this.fail(`stream ${this.id}: the writer sent ${this.received - this.granted} bytes beyond its window`);
      return;
    }
    if (chunk.length > 0) this.queue.push(chunk);
    if (this.wanted) this.flush();
  }

  /** The writer's `end` frame: the end of the bytes, or an error. */
  finish(error?: string): void {
    if (this.finished || this.ended) return;
    if (error !== undefined) this.fail(`stream ${this.id}: ${error}`);
    else {
      this.ended = true;
      if (this.wanted) this.flush();
    }
  }

  fail(message: string): void {
    if (this.finished) return;
    this.finished = true;
    this.queue = [];
    this.destroy(new Error(message));
  }

  override _read(): void {
    this.wanted = true;
    this.flush();
  }

  /** Hands queued chunks to the consumer while it wants more, then grants what it took. */
  private flush(): void {
    while (this.wanted && this.queue.length > 0) {
      const chunk = this.queue.shift() as Buffer;
      this.pulled += chunk.length;
      this.wanted = this.push(chunk);
    }
    if (this.queue.length === 0 && this.ended && !this.finished) {
      this.finished = true;
      this.push(null);
      return;
    }
    // Batched, except when the queue is empty: then everything consumed is granted, or a
    // writer left with little credit could stall. A widened stream waits for that until the
    // writer's credit runs low: its consumer empties the queue at every chunk.
    const idle =
      this.queue.length === 0 &&
      (this.threshold === GRANT_THRESHOLD || this.granted - this.received < this.threshold);
    if (this.pulled > 0 && (this.pulled >= this.threshold || idle) && !this.finished) {
      this.granted += this.pulled;
      this.send({ v: PROTOCOL_VERSION, type: "window", stream: this.id, bytes: this.pulled });
      this.pulled = 0;
    }
  }
}

/**
 * Bytes to the control plane. `write` queues and sends as credit allows; it returns false once
 * `highWater` bytes wait for credit (then wait for "drain"), as Writable.write does.
 */
export class OutboundStream extends EventEmitter {
  private credit = INITIAL_WINDOW;
  private chunk = MAX_DATA_CHUNK;
  /** Bulk: small writes wait a turn of the event loop, to go out together in one frame. */
  private coalesce = false;
  private scheduled = false;
  private queue: Array<{ channel: Channel; data: Buffer; lease?: Lease }> = [];
  private queued = 0;
  private seq = 0;
  private needDrain = false;
  private ending: { error?: string } | undefined;
  private closed = false;
  private resolveDone!: () => void;
  /** Settles when the end frame was sent (or the stream was dropped). */
  readonly done: Promise<void> = new Promise((r) => {
    this.resolveDone = r;
  });
  /** Largest number of bytes that waited here for credit. */
  maxQueued = 0;
  sent: Record<Channel, number> = { stdin: 0, stdout: 0, stderr: 0, tunnel: 0, file: 0 };

  constructor(
    readonly id: string,
    private readonly send: SendFrame,
    private highWater = MAX_DATA_CHUNK,
  ) {
    super();
  }

  /**
   * A bulk stream: frames of up to MAX_BULK_CHUNK, and what is written in one turn of the event
   * loop goes out together (a transfer's records come as many small writes: header, body,
   * checksum). Call before `writable`, which takes the high water.
   */
  bulk(): this {
    this.chunk = MAX_BULK_CHUNK;
    this.highWater = Math.max(this.highWater, MAX_BULK_CHUNK);
    this.coalesce = true;
    return this;
  }

  /** The stream is over (ended, aborted or dropped): writes are refused. */
  get isClosed(): boolean {
    return this.closed;
  }

  /**
   * Queues bytes and sends them as credit allows. `release`, when given, is called once no frame
   * needs `data` any more (sent, copied into a frame, or dropped): the writer may reuse it.
   */
  write(channel: Channel, data: Buffer, release?: () => void): boolean {
    if (this.closed || this.ending) {
      release?.();
      return false;
    }
    if (data.length === 0) release?.();
    else {
      this.queue.push({ channel, data, ...(release ? { lease: new Lease(release) } : {}) });
      this.queued += data.length;
      this.maxQueued = Math.max(this.maxQueued, this.queued);
      this.pump();
    }
    const ok = this.queued < this.highWater;
    if (!ok) this.needDrain = true;
    return ok;
  }

  grant(bytes: number): void {
    this.credit += bytes;
    this.pump();
  }

  /** Sends what is queued (as credit comes), then the end frame. */
  end(error?: string): Promise<void> {
    if (!this.ending && !this.closed) {
      this.ending = error === undefined ? {} : { error };
      this.pump();
    }
    return this.done;
  }

  /** Ends at once with an error: what waits for credit is dropped. */
  abort(error: string): void {
    if (this.closed) return;
    this.clearQueue();
    this.send({ v: PROTOCOL_VERSION, type: "end", stream: this.id, error });
    this.close();
  }

  /** Drops the stream without an end frame (the connection is gone). */
  drop(): void {
    this.clearQueue();
    this.close();
  }

  private clearQueue(): void {
    for (const item of this.queue) item.lease?.dequeued();
    this.queue = [];
    this.queued = 0;
  }

  /** A Writable over one channel, for pipeline() users (files, tunnels). */
  writable(channel: Channel): Writable {
    return new Writable({
      highWaterMark: this.highWater,
      write: (chunk: Buffer, _enc, cb) => {
        if (this.closed) cb(new Error(`stream ${this.id} is closed`));
        else if (this.write(channel, chunk)) cb();
        else this.once("drain", () => cb());
      },
      final: (cb) => {
        void this.end().then(() => cb());
      },
    });
  }

  private pump(flush = !this.coalesce): void {
    while (this.queue.length > 0 && this.credit > 0 && !this.closed) {
      const limit = Math.min(this.credit, this.chunk);
      if (!flush && !this.ending && this.queued < limit) {
        this.schedule();
        break;
      }
      // A bulk writer's piece that fits one frame waits for the credit to send it whole, rather
      // than go out cut, its rest to be copied into the next frame.
      const head = (this.queue[0] as { data: Buffer }).data.length;
      if (this.coalesce && head <= this.chunk && head > this.credit) break;
      const { channel, data, sent } = this.take(limit);
      this.queued -= data.length;
      this.credit -= data.length;
      this.sent[channel] += data.length;
      this.send({ v: PROTOCOL_VERSION, type: "data", stream: this.id, seq: this.seq++, channel, data }, sent);
    }
    if (this.needDrain && this.queued < this.highWater) {
      this.needDrain = false;
      this.emit("drain");
    }
    if (this.ending && this.queue.length === 0 && !this.closed) {
      this.send({
        v: PROTOCOL_VERSION,
        type: "end",
        stream: this.id,
        ...(this.ending.error !== undefined ? { error: this.ending.error } : {}),
      });
      this.close();
    }
  }

  /**
   * The next frame's bytes: the head of the queue, joined with what follows on its channel. A
   * frame of one piece is a view of the writer's buffer, held until the frame was sent; joined
   * pieces are copies, their buffers free at once.
   */
  private take(limit: number): { channel: Channel; data: Buffer; sent?: () => void } {
    const head = this.queue[0] as { channel: Channel; data: Buffer };
    const { channel } = head;
    const parts: Array<{ piece: Buffer; lease?: Lease; last: boolean }> = [];
    let n = 0;
    while (n < limit) {
      const next = this.queue[0];
      if (!next || next.channel !== channel) break;
      const piece = next.data.subarray(0, limit - n);
      next.data = next.data.subarray(piece.length);
      const last = next.data.length === 0;
      if (last) this.queue.shift();
      parts.push({ piece, ...(next.lease ? { lease: next.lease } : {}), last });
      n += piece.length;
    }
    if (parts.length === 1) {
      const { piece, lease, last } = parts[0] as (typeof parts)[number];
      const sent = lease?.hold();
      if (last) lease?.dequeued();
      return { channel, data: piece, ...(sent ? { sent } : {}) };
    }
    const data = Buffer.concat(
      parts.map((p) => p.piece),
      n,
    );
    for (const p of parts) if (p.last) p.lease?.dequeued();
    return { channel, data };
  }

  private schedule(): void {
    if (this.scheduled) return;
    this.scheduled = true;
    setImmediate(() => {
      this.scheduled = false;
      this.pump(true);
    });
  }

  private close(): void {
    if (this.closed) return;
    this.closed = true;
    // Writers waiting for credit must not wait forever.
    this.emit("drain");
    this.resolveDone();
  }
}

/** A writer's buffer queued here: released once it left the queue and no frame holds it. */
class Lease {
  private refs = 0;
  private queued = true;
  private released = false;

  constructor(private readonly release: () => void) {}

  /** A frame holds the buffer: the returned function lets go of it. */
  hold(): () => void {
    this.refs++;
    let held = true;
    return () => {
      if (!held) return;
      held = false;
      this.refs--;
      this.settle();
    };
  }

  dequeued(): void {
    this.queued = false;
    this.settle();
  }

  private settle(): void {
    if (this.released || this.queued || this.refs > 0) return;
    this.released = true;
    this.release();
  }
}

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
