import { createHash } from "node:crypto";
import { once } from "node:events";
import type { Writable } from "node:stream";
import { DenvError, MAX_TRANSFER_CHUNK, MAX_TRANSFER_JSON, TransferRecordType } from "@denv/spec";

/**
 * The records of a version transfer (spec: protocol/transfer.ts): type, length, body, SHA-256 of
 * the body. The writer waits for the stream's drain, so a slow receiver slows the sender; the
 * reader checks every checksum and length before it hands a record on.
 */

export type RecordType = (typeof TransferRecordType)[keyof typeof TransferRecordType];

const HEADER = 5;
const DIGEST = 32;
const TYPES = new Set<number>(Object.values(TransferRecordType));

export class RecordWriter {
  bytes = 0;
  records = 0;

  constructor(private readonly out: Writable) {}

  json(type: Exclude<RecordType, typeof TransferRecordType.data>, value: unknown): Promise<void> {
    return this.put(type, Buffer.from(JSON.stringify(value)));
  }

  /** Bytes of the current file entry, cut into chunks of at most MAX_TRANSFER_CHUNK. */
  async data(buf: Buffer): Promise<void> {
    for (let at = 0; at < buf.length; at += MAX_TRANSFER_CHUNK) {
      await this.put(TransferRecordType.data, buf.subarray(at, at + MAX_TRANSFER_CHUNK));
    }
  }

  private async put(type: RecordType, body: Buffer): Promise<void> {
    const head = Buffer.alloc(HEADER);
    head.writeUInt8(type, 0);
    head.writeUInt32BE(body.length, 1);
    const digest = createHash("sha256").update(body).digest();
    this.records++;
    this.bytes += HEADER + body.length + DIGEST;
    const ok = [head, body, digest].map((b) => this.out.write(b)).every(Boolean);
    if (!ok) await once(this.out, "drain");
  }
}

export interface TransferRecord {
  type: RecordType;
  body: Buffer;
}

/** Records from a byte stream; throws a one-line DenvError at the first bad one. */
export async function* readRecords(source: AsyncIterable<Buffer>): AsyncGenerator<TransferRecord> {
  let chunks: Buffer[] = [];
  let length = 0;
  let offset = 0;
  const take = (n: number): Buffer => {
    const joined = chunks.length === 1 ? (chunks[0] as Buffer) : Buffer.concat(chunks);
    const out = joined.subarray(0, n);
    chunks = joined.length > n ? [joined.subarray(n)] : [];
    length -= n;
    return out;
  };
  let want: { type: RecordType; size: number } | undefined;
  for await (const chunk of source) {
    chunks.push(chunk);
    length += chunk.length;
    for (;;) {
      if (!want) {
        if (length < HEADER) break;
        const head = take(HEADER);
        const type = head.readUInt8(0);
        const size = head.readUInt32BE(1);
        if (!TYPES.has(type)) throw bad(offset, `unknown record type 0x${type.toString(16)}`);
        const limit = type === TransferRecordType.data ? MAX_TRANSFER_CHUNK : MAX_TRANSFER_JSON;
        if (size > limit) throw bad(offset, `a record of ${size} bytes is over the limit of ${limit}`);
        want = { type: type as RecordType, size };
      }
      if (length < want.size + DIGEST) break;
      // A copy: the body outlives the buffer it was cut from.
      const body = Buffer.from(take(want.size));
      const digest = take(DIGEST);
      if (!createHash("sha256").update(body).digest().equals(digest)) {
        throw bad(offset, "checksum mismatch (the chunk was corrupted on the way)");
      }
      offset += HEADER + want.size + DIGEST;
      yield { type: want.type, body };
      want = undefined;
    }
  }
  if (want || length > 0) throw bad(offset, "the stream ended in the middle of a record");
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
