import { EventEmitter } from "node:events";
import { Writable } from "node:stream";
import {
  INITIAL_WINDOW,
  MAX_BULK_CHUNK,
  MAX_DATA_CHUNK,
  PROTOCOL_VERSION,
  type RawDataFrame,
} from "@denv/spec/protocol/frames";
import type { SendFrame } from "./send-frame.js";

type Channel = RawDataFrame["channel"];

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
