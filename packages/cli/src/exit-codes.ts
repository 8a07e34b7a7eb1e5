/**
 * The CLI's own errors. Exit codes are spec's ExitCodes: a UsageError exits `usage`, a CliError
 * `failure` (`denv exec`: `denvFailure`).
 */

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
