import { Transform } from "node:stream";

/**
 * One line of stderr that a long operation rewrites in place (bytes uploaded, the running
 * phase's time and last log line), as docker and gh show progress. Only when stderr is a
 * terminal and the command prints no --json: piped or in --json, `update` does nothing, so a
 * log or a script never sees carriage returns or escape sequences.
 */
export class LiveLine {
  readonly #write: (text: string) => void;
  readonly #columns: number;
  readonly #enabled: boolean;
  #shown = false;
  #last = 0;

  constructor(write: (text: string) => void, enabled: boolean, columns = 80) {
    this.#write = write;
    this.#enabled = enabled;
    this.#columns = Math.max(20, columns);
  }

  get enabled(): boolean {
    return this.#enabled;
  }

  /** Shows `text` in place of the previous one; at most every `everyMs` unless `force`. */
  update(text: string, options: { force?: boolean; everyMs?: number } = {}): void {
    if (!this.#enabled) return;
    const now = Date.now();
    if (!options.force && this.#shown && now - this.#last < (options.everyMs ?? 100)) return;
    this.#last = now;
    const line = text.length < this.#columns ? text : `${text.slice(0, this.#columns - 2)}…`;
    this.#write(`\r\x1b[2K${line}`);
    this.#shown = true;
  }

  /** Wipes the line, so that the next ordinary line starts on a clean one. */
  clear(): void {
    if (!this.#shown) return;
    this.#write("\r\x1b[2K");
    this.#shown = false;
  }
}

/** `1.5 MiB`, `312 B`. */
export function formatBytes(n: number): string {
  if (n < 1024) return `${n} B`;
  const units = ["KiB", "MiB", "GiB", "TiB"];
  let v = n / 1024;
  let u = 0;
  for (; v >= 1024 && u < units.length - 1; u++) v /= 1024;
  return `${v.toFixed(1)} ${units[u]}`;
}

/** A pass-through stream that counts what goes through it and reports the running total. */
export function countingStream(onBytes: (total: number) => void): Transform {
  let total = 0;
  return new Transform({
    transform(chunk: Buffer, _enc, done) {
      total += chunk.length;
      onBytes(total);
      done(null, chunk);
    },
  });
}
