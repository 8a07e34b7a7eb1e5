/** The command line of a benchmark: flags with values, positive counts, `--only` lists, `--help`. */

export interface ArgReader {
  /** The flag's value (the next argument). */
  value(): string;
  /** The flag's value as a positive integer. */
  count(): number;
  /** The flag's comma-separated value, each one of `all`. */
  oneOf<T extends string>(all: readonly T[], what: string): T[];
}

/**
 * Walks `argv`: `-h`/`--help` prints `usage` and exits; every other argument goes to `handle`,
 * which returns false for an argument it does not know (an error naming it, with the usage).
 */
export function readArgs(
  argv: string[],
  usage: string,
  handle: (arg: string, r: ArgReader) => boolean,
): void {
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i] as string;
    const r: ArgReader = {
      value() {
        const v = argv[++i];
        if (v === undefined) throw new Error(`${arg} needs a value\n${usage}`);
        return v;
      },
      count() {
        const n = Number(r.value());
        if (!Number.isInteger(n) || n < 1) throw new Error(`${arg} needs a positive integer`);
        return n;
      },
      oneOf<T extends string>(all: readonly T[], what: string): T[] {
        const names = r.value().split(",");
        for (const n of names) {
          if (!(all as readonly string[]).includes(n))
            throw new Error(`${arg}: unknown ${what} '${n}'\n${usage}`);
        }
        return names as T[];
      },
    };
    if (arg === "-h" || arg === "--help") {
      console.log(usage);
      process.exit(0);
    }
    if (!handle(arg, r)) throw new Error(`unknown argument '${arg}'\n${usage}`);
  }
}
