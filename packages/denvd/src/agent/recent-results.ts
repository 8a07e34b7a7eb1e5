import type { ResultFrame } from "@denv/spec";

/**
 * Result frames of recent commands, whole, in memory. They answer a command re-sent after a
 * reconnect with everything it returned (the journal keeps no exec output on disk), and hold
 * the results that finished while the socket was down until the next connection. Bounded by
 * count and bytes; the oldest go first (the journal still answers for them).
 */
export class RecentResults {
  private entries = new Map<string, { frame: ResultFrame; bytes: number; unsent: boolean }>();
  private bytes = 0;

  constructor(
    private readonly maxBytes = 64 * 1024 * 1024,
    private readonly maxEntries = 1000,
  ) {}

  put(frame: ResultFrame, sent: boolean): void {
    this.drop(frame.id);
    const bytes = JSON.stringify(frame).length;
    if (bytes > this.maxBytes) return;
    this.entries.set(frame.id, { frame, bytes, unsent: !sent });
    this.bytes += bytes;
    while (this.bytes > this.maxBytes || this.entries.size > this.maxEntries) {
      const oldest = this.entries.keys().next();
      if (oldest.done) break;
      this.drop(oldest.value);
    }
  }

  get(id: string): ResultFrame | undefined {
    return this.entries.get(id)?.frame;
  }

  /** Results not sent yet, oldest first. */
  unsent(): ResultFrame[] {
    return [...this.entries.values()].filter((e) => e.unsent).map((e) => e.frame);
  }

  markSent(id: string): void {
    const e = this.entries.get(id);
    if (e) e.unsent = false;
  }

  private drop(id: string): void {
    const e = this.entries.get(id);
    if (!e) return;
    this.bytes -= e.bytes;
    this.entries.delete(id);
  }
}
