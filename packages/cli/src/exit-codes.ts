/**
 * The exit codes of `denv` commands, defined in one place. `denv exec` passes its command's code
 * through and uses spec's ExitCodes (125 for its own failures) instead.
 */
export const ExitCode = {
  ok: 0,
  /** The command ran and the answer is no (refusals, a failed deployment), or denv failed. */
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

/**
 * A failure the CLI itself found (no project given, a local file missing): like the SDK's
 * errors it has a stable code and a message that says what to do.
 */
export class CliError extends Error {
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message);
    this.name = "CliError";
  }
}
