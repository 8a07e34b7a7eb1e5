import { createHash } from "node:crypto";
import { closeSync, constants, openSync, readSync } from "node:fs";
import type { Writable } from "node:stream";
import {
  DenvError,
  MAX_BULK_CHUNK,
  MAX_TRANSFER_CHUNK,
  MAX_TRANSFER_JSON,
  TransferRecordType,
} from "@denv/spec";

/**
 * The records of a version transfer (spec: protocol/transfer.ts): type, length, body, SHA-256 of
 * the body. The writer waits for the stream's drain, so a slow receiver slows the sender; the
 * reader checks every checksum and length before it hands a record on.
 */

export type RecordType = (typeof TransferRecordType)[keyof typeof TransferRecordType];

const HEADER = 5;
const DIGEST = 32;
const TYPES = new Set<number>(Object.values(TransferRecordType));
/** A writer's batch: one data frame of a bulk stream. */
const BATCH = MAX_BULK_CHUNK;
/** A data record shorter than this waits for the next batch rather than end this one. */
const MIN_DATA = 4096;

/**
 * Writes records into batches of BATCH bytes, each one write to the stream (one data frame of a
 * bulk stream): a file's bytes are read straight into the batch, so a tree of small files costs
 * neither a buffer per file nor a copy to join its records. A data record may be cut anywhere
 * (each is checked on its own), so a file's records are cut to fit the batch they go in. What a
 * batch holds goes out when it is full, when the sender stops to wait (the next turn of the event
 * loop), and at `flush`.
 */
export class RecordWriter {
  bytes = 0;
  records = 0;
  private batch: Buffer;
  private used = 0;
  private idle: NodeJS.Immediate | undefined;
  /** Batches the sink let go of, for the next ones (a sink without leases: none). */
  private free: Buffer[] = [];

  constructor(private readonly out: Writable | BatchSink) {
    this.batch = this.newBatch();
  }

  private newBatch(): Buffer {
    return this.free.pop() ?? Buffer.allocUnsafe(BATCH);
  }

  /** Writes bytes out; false: wait for `drained` before more. */
  private put(bytes: Buffer, batch?: Buffer): boolean {
    if (!("writeBatch" in this.out)) return this.out.write(bytes);
    const release = batch
      ? () => {
          if (this.free.length < MAX_FREE) this.free.push(batch);
        }
      : noop;
    return this.out.writeBatch(bytes, release);
  }

  private drained(): Promise<void> {
    return "writeBatch" in this.out ? this.out.drained() : drained(this.out);
  }

  json(type: Exclude<RecordType, typeof TransferRecordType.data>, value: unknown): Promise<void> {
    return this.record(type, Buffer.from(JSON.stringify(value)));
  }

  /** Bytes of the current file entry, in records of at most MAX_TRANSFER_CHUNK. */
  async data(buf: Buffer): Promise<void> {
    for (let at = 0; at < buf.length; ) {
      await this.room(buf.length - at);
      const n = Math.min(buf.length - at, MAX_TRANSFER_CHUNK, BATCH - this.used - HEADER - DIGEST);
      buf.copy(this.batch, this.used + HEADER, at, at + n);
      this.seal(TransferRecordType.data, n);
      at += n;
    }
    this.later();
  }

  /**
   * Bytes `offset` to `size` of the file at `path` (opened without following a symlink), read
   * straight into the batches as data records. Synchronous reads: the sender awaits each batch's
   * way out, which gives the event loop its turn whenever the stream's credit runs out.
   */
  async file(path: string, offset: number, size: number): Promise<void> {
    const fd = openSync(path, constants.O_RDONLY | constants.O_NOFOLLOW);
    try {
      for (let at = offset; at < size; ) {
        await this.room(size - at);
        const want = Math.min(size - at, MAX_TRANSFER_CHUNK, BATCH - this.used - HEADER - DIGEST);
        const n = readSync(fd, this.batch, this.used + HEADER, want, at);
        if (n === 0) throw new DenvError("conflict", `${path} shrank while it was being sent`);
        this.seal(TransferRecordType.data, n);
        at += n;
      }
    } finally {
      closeSync(fd);
    }
    this.later();
  }

  /** Sends what the batch holds, and waits while the stream is full. */
  async flush(): Promise<void> {
    clearImmediate(this.idle);
    this.idle = undefined;
    if (this.used === 0) return;
    const batch = this.batch;
    const used = this.used;
    this.batch = this.newBatch();
    this.used = 0;
    if (!this.put(batch.subarray(0, used), batch)) await this.drained();
  }

  private async record(type: RecordType, body: Buffer): Promise<void> {
    if (HEADER + body.length + DIGEST > BATCH) {
      // A large JSON record (a manifest): on its own, after what the batch holds.
      await this.flush();
      const head = Buffer.alloc(HEADER);
      head.writeUInt8(type, 0);
      head.writeUInt32BE(body.length, 1);
      this.records++;
      this.bytes += HEADER + body.length + DIGEST;
      const ok = [head, body, createHash("sha256").update(body).digest()]
        .map((b) => this.put(b))
        .every(Boolean);
      if (!ok) await this.drained();
      return;
    }
    if (this.used + HEADER + body.length + DIGEST > BATCH) await this.flush();
    body.copy(this.batch, this.used + HEADER);
    this.seal(type, body.length);
    this.later();
  }

  /** A record's body of `n` bytes is in the batch after room for its header: head and digest. */
  private seal(type: RecordType, n: number): void {
    const at = this.used;
    this.batch.writeUInt8(type, at);
    this.batch.writeUInt32BE(n, at + 1);
    const digest = createHash("sha256")
      .update(this.batch.subarray(at + HEADER, at + HEADER + n))
      .digest();
    digest.copy(this.batch, at + HEADER + n);
    this.used += HEADER + n + DIGEST;
    this.records++;
    this.bytes += HEADER + n + DIGEST;
  }

  /** Room in the batch for a data record of `want` bytes, or one worth its header. */
  private async room(want: number): Promise<void> {
    if (BATCH - this.used - HEADER - DIGEST < Math.min(want, MIN_DATA)) await this.flush();
  }

  /** A batch left part full goes out at the next turn of the event loop. */
  private later(): void {
    if (this.used === 0 || this.idle) return;
    this.idle = setImmediate(() => {
      this.idle = undefined;
      // A broken stream says so to the sender's next write; nothing waits on this one.
      this.flush().catch(() => undefined);
    });
  }
}

/**
 * Where a writer's batches go without a Writable in between: `release` is called once the sink
 * is done with a batch (sent, or dropped), which may then be filled again, so a transfer does
 * not allocate a new buffer per batch (V8 collects garbage for every few MB of new buffers).
 */
export interface BatchSink {
  writeBatch(bytes: Buffer, release: () => void): boolean;
  /** Resolves when the sink takes more, rejects when it broke. */
  drained(): Promise<void>;
}

/** Batches kept for reuse: a window's worth (8 MiB) of 256 KiB batches, and a few more. */
const MAX_FREE = 40;

const noop = () => {};

/** The stream took what waited (drain), or it broke (its error, at once if it broke before). */
function drained(out: Writable): Promise<void> {
  if (out.destroyed) return Promise.reject(out.errored ?? new Error("the stream closed"));
  return new Promise((resolve, reject) => {
    const done = (err?: Error | null) => {
      out.off("drain", onDrain);
      out.off("error", onError);
      out.off("close", onClose);
      if (err) reject(err);
      else resolve();
    };
    const onDrain = () => done();
    const onError = (err: Error) => done(err);
    const onClose = () => done(out.errored ?? new Error("the stream closed"));
    out.on("drain", onDrain);
    out.on("error", onError);
    out.on("close", onClose);
  });
}

export interface TransferRecord {
  type: RecordType;
  body: Buffer;
}

/**
 * The bytes received and not yet read, as the chunks they came in. `take` cuts a view out of
 * the first chunk when it holds all of it (a record body inside one data frame: no copy) and
 * copies only what spans chunks, so a stream of records costs no more than one copy per byte.
 * What spans chunks is copied into `into` when given (a buffer the caller reuses: a socket's
 * reads are 64 KiB, so over a direct connection nearly every record spans them, and a new
 * buffer per record would be garbage for the collector).
 */
class Chunks {
  private list: Buffer[] = [];
  length = 0;

  push(chunk: Buffer): void {
    if (chunk.length === 0) return;
    this.list.push(chunk);
    this.length += chunk.length;
  }

  take(n: number, into?: Buffer): Buffer {
    const first = this.list[0] as Buffer;
    let out: Buffer;
    if (first.length >= n) {
      out = first.subarray(0, n);
      if (first.length === n) this.list.shift();
      else this.list[0] = first.subarray(n);
    } else {
      out = into && into.length >= n ? into.subarray(0, n) : Buffer.allocUnsafe(n);
      let at = 0;
      while (at < n) {
        const head = this.list[0] as Buffer;
        const m = Math.min(head.length, n - at);
        head.copy(out, at, 0, m);
        at += m;
        if (m === head.length) this.list.shift();
        else this.list[0] = head.subarray(m);
      }
    }
    this.length -= n;
    return out;
  }
}

/**
 * Records from a byte stream; throws a one-line DenvError at the first bad one. A record's body
 * is valid until the next record is asked for (it may be a view of a buffer reused for the next):
 * the receiver writes or parses each one before it reads on.
 */
export async function* readRecords(source: AsyncIterable<Buffer>): AsyncGenerator<TransferRecord> {
  const chunks = new Chunks();
  let offset = 0;
  const take = (n: number): Buffer => chunks.take(n);
  /** Bodies that span chunks are copied here; digests into their own. */
  let scratch = Buffer.allocUnsafe(MAX_TRANSFER_CHUNK);
  const digestScratch = Buffer.allocUnsafe(DIGEST);
  let want: { type: RecordType; size: number } | undefined;
  for await (const chunk of source) {
    chunks.push(chunk);
    for (;;) {
      if (!want) {
        if (chunks.length < HEADER) break;
        const head = take(HEADER);
        const type = head.readUInt8(0);
        const size = head.readUInt32BE(1);
        if (!TYPES.has(type)) throw bad(offset, `unknown record type 0x${type.toString(16)}`);
        const limit = type === TransferRecordType.data ? MAX_TRANSFER_CHUNK : MAX_TRANSFER_JSON;
        if (size > limit) throw bad(offset, `a record of ${size} bytes is over the limit of ${limit}`);
        want = { type: type as RecordType, size };
      }
      if (chunks.length < want.size + DIGEST) break;
      // A view of the received bytes where it can be (they are this stream's own), else a copy
      // into the scratch buffer, which the next record reuses.
      if (want.size > scratch.length) scratch = Buffer.allocUnsafe(want.size);
      const body = chunks.take(want.size, scratch);
      const digest = chunks.take(DIGEST, digestScratch);
      if (!createHash("sha256").update(body).digest().equals(digest)) {
        throw bad(offset, "checksum mismatch (the chunk was corrupted on the way)");
      }
      offset += HEADER + want.size + DIGEST;
      yield { type: want.type, body };
      want = undefined;
    }
  }
  if (want || chunks.length > 0) throw bad(offset, "the stream ended in the middle of a record");
}

function bad(offset: number, why: string): DenvError {
  return new DenvError("invalid_request", `version transfer: record at byte ${offset}: ${why}`);
}

export function parseJson(r: TransferRecord): unknown {
  try {
    return JSON.parse(r.body.toString("utf8"));
  } catch {
    throw new DenvError("invalid_request", "version transfer: a record's JSON does not parse");
  }
}
