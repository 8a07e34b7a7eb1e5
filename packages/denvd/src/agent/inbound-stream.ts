import { Readable } from "node:stream";
import {
  INITIAL_WINDOW,
  MAX_BULK_CHUNK,
  MAX_DATA_CHUNK,
  PROTOCOL_VERSION,
  type RawDataFrame,
} from "@denv/spec/protocol/frames";
import type { SendFrame } from "./send-frame.js";

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
