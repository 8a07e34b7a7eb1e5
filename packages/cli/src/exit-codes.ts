/** The exit codes of `denv` commands, defined in one place. */
export const ExitCode = {
  ok: 0,
  /** The command ran and the answer is no (refusals), or an input could not be read. */
  failure: 1,
  /** Bad usage: unknown command or flag, wrong number of arguments. */
  usage: 2,
} as const;

export type ExitCode = (typeof ExitCode)[keyof typeof ExitCode];

/** Thrown by argument parsing; main prints the message and the usage line and exits 2. */
export class UsageError extends Error {
  constructor(
    message: string,
    readonly usage: string,
  ) {
    super(message);
    this.name = "UsageError";
  }
}
