import { z } from "zod";

/** The longest exec timeout, in seconds (a week): what a timer can wait, and more than any episode. */
export const MAX_EXEC_TIMEOUT_SEC = 7 * 24 * 3600;

/**
 * The exec contract: one schema used by the API, the protocol, the CLI, the SDK and Python.
 * Bytes travel as base64 in JSON; the runtime also takes streams.
 */
export const ExecRequest = z
  .object({
    /** argv form. Exactly one of `cmd` and `shell`. */
    cmd: z.array(z.string()).min(1).optional(),
    /** Shell form, run with `sh -c`. */
    shell: z.string().optional(),
    /** Default: the agent service. */
    service: z.string().optional(),
    /** Default: the agent user. Root is refused on the agent service of an rl-environment. */
    user: z.string().optional(),
    cwd: z.string().optional(),
    env: z.record(z.string(), z.string()).optional(),
    /** Standard input, base64. */
    stdin: z.string().optional(),
    /** Seconds; on expiry the whole process tree is killed and `timed_out` is set. */
    timeout: z.number().positive().max(MAX_EXEC_TIMEOUT_SEC).optional(),
    tty: z.boolean().optional(),
    /** Per-stream output cap in bytes (default 10 MiB). */
    output_limit: z.number().int().positive().optional(),
  })
  .refine((r) => (r.cmd === undefined) !== (r.shell === undefined), {
    message: "give exactly one of 'cmd' (argv) and 'shell' (a string for sh -c)",
  });
export type ExecRequest = z.infer<typeof ExecRequest>;

export const ExecResult = z.object({
  /** The command's exit code; 124 when it timed out; 126/127 when it could not be started. */
  exit_code: z.number().int(),
  /** base64 when `encoding` is "base64", else UTF-8 text. */
  stdout: z.string(),
  stderr: z.string(),
  timed_out: z.boolean(),
  truncated: z.boolean(),
  duration_ms: z.number().int().nonnegative(),
});
export type ExecResult = z.infer<typeof ExecResult>;

export const DEFAULT_OUTPUT_LIMIT = 10 * 1024 * 1024;
