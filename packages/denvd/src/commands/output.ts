import { ExitCodes } from "@denv/spec/messages";

/**
 * How a verb answers: with --json exactly one JSON object on stdout, else text; errors go to
 * stderr as one line. Exit codes are spec's ExitCodes: ok, failure, usage.
 */
export interface Output {
  result(json: unknown, text: string): void;
  /** Prints the error and returns the exit code to use. */
  fail(message: string, code?: typeof ExitCodes.failure | typeof ExitCodes.usage): number;
}

export function output(json: boolean, stdout: NodeJS.WritableStream, stderr: NodeJS.WritableStream): Output {
  return {
    result(value, text) {
      stdout.write(json ? `${JSON.stringify(value)}\n` : `${text}\n`);
    },
    fail(message, code = ExitCodes.failure) {
      if (json) stdout.write(`${JSON.stringify({ error: { message } })}\n`);
      stderr.write(`denvd: ${message}\n`);
      return code;
    },
  };
}
