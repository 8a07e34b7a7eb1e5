import type { Readable } from "node:stream";

/** What a command may touch of the process: injected so commands stay testable. */
export interface Io {
  stdout(text: string | Uint8Array): void;
  stderr(text: string | Uint8Array): void;
  stdin: Readable & { isTTY?: boolean; setRawMode?: (raw: boolean) => unknown };
  /** Whether stdout and stderr are terminals (decides colour-free progress vs. nothing). */
  stdoutIsTty: boolean;
  /** Whether stderr is a terminal, and its width: progress rewritten in place only there. */
  stderrIsTty: boolean;
  stderrColumns: number | undefined;
  cwd: string;
  env: NodeJS.ProcessEnv;
  /** Resolves with the name of the first SIGINT or SIGTERM (long-running commands stop on it). */
  untilSignal(): Promise<string>;
}

export function processIo(): Io {
  return {
    stdout: (text) => process.stdout.write(text),
    stderr: (text) => process.stderr.write(text),
    stdin: process.stdin,
    stdoutIsTty: process.stdout.isTTY === true,
    stderrIsTty: process.stderr.isTTY === true,
    stderrColumns: process.stderr.columns,
    cwd: process.cwd(),
    env: process.env,
    untilSignal: () =>
      new Promise((resolve) => {
        process.once("SIGINT", () => resolve("SIGINT"));
        process.once("SIGTERM", () => resolve("SIGTERM"));
      }),
  };
}
