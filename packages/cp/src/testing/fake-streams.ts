import { createHash } from "node:crypto";
import { type DataFrame, type Frame, INITIAL_WINDOW, MAX_DATA_CHUNK, PROTOCOL_VERSION } from "@denv/spec";

/**
 * The fake host's ends of data streams, with the same credit rules as denvd: what it reads it
 * grants back (optionally slowly), what it writes waits for the cp's credit. It records how the
 * cp behaved as a writer (`overrun` must stay 0) and as a reader (`maxOutstanding`).
 */

type Send = (f: Frame) => void;

export class FakeReader {
  private chunks: Buffer[] = [];
  private received = 0;
  private granted = INITIAL_WINDOW;
  private resolveEnd!: (error: string | undefined) => void;
  readonly ended: Promise<string | undefined> = new Promise((r) => {
    this.resolveEnd = r;
  });
  /** Bytes the cp sent beyond the credit it had (must stay 0). */
  overrun = 0;
  bytesByChannel: Record<string, number> = {};
  private hash = createHash("sha256");
  onData?: (channel: DataFrame["channel"], data: Buffer) => void;

  constructor(
    readonly id: string,
    private readonly send: Send,
    /** Delay before granting back what was read: a slow reader. */
    private readonly grantDelayMs = 0,
    /** Keep the bytes (for small transfers the test inspects). */
    private readonly keep = true,
  ) {}

  get bytes(): number {
    return this.received;
  }

  data(): Buffer {
    return Buffer.concat(this.chunks);
  }

  accept(f: DataFrame): void {
    const data = Buffer.from(f.data, "base64");
    this.received += data.length;
    if (this.received > this.granted) this.overrun = Math.max(this.overrun, this.received - this.granted);
    this.bytesByChannel[f.channel] = (this.bytesByChannel[f.channel] ?? 0) + data.length;
    this.hash.update(data);
    if (this.keep) this.chunks.push(data);
    this.onData?.(f.channel, data);
    const grant = () => {
      this.granted += data.length;
      this.send({ v: PROTOCOL_VERSION, type: "window", stream: this.id, bytes: data.length });
    };
    if (data.length === 0) return;
    if (this.grantDelayMs > 0) setTimeout(grant, this.grantDelayMs).unref();
    else grant();
  }

  finish(error?: string): void {
    this.resolveEnd(error);
  }

  sha256(): string {
    return this.hash.copy().digest("hex");
  }
}

export class FakeWriter {
  private credit = INITIAL_WINDOW;
  private seq = 0;
  private waiting: (() => void) | undefined;
  /** Largest credit the cp ever had outstanding to this writer (bounded by one window). */
  maxCredit = INITIAL_WINDOW;
  sent = 0;
  closed = false;

  constructor(
    readonly id: string,
    private readonly send: Send,
  ) {}

  grant(bytes: number): void {
    this.credit += bytes;
    this.maxCredit = Math.max(this.maxCredit, this.credit);
    const w = this.waiting;
    this.waiting = undefined;
    w?.();
  }

  async write(channel: DataFrame["channel"], data: Buffer): Promise<void> {
    let rest = data;
    while (rest.length > 0) {
      if (this.closed) throw new Error(`stream ${this.id} closed`);
      if (this.credit <= 0) {
        await new Promise<void>((r) => {
          this.waiting = r;
        });
        continue;
      }
      const n = Math.min(rest.length, this.credit, MAX_DATA_CHUNK);
      this.credit -= n;
      this.sent += n;
      this.send({
        v: PROTOCOL_VERSION,
        type: "data",
        stream: this.id,
        seq: this.seq++,
        channel,
        data: rest.subarray(0, n).toString("base64"),
      });
      rest = rest.subarray(n);
    }
  }

  end(error?: string): void {
    this.send({ v: PROTOCOL_VERSION, type: "end", stream: this.id, error: error || undefined });
  }

  close(): void {
    this.closed = true;
    this.waiting?.();
  }
}
