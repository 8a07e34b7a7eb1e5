import { randomBytes } from "node:crypto";
import type { Readable } from "node:stream";
import { buffer } from "node:stream/consumers";
import { DEFAULT_OUTPUT_LIMIT } from "@denv/spec";
import type { RawExecResult } from "../../exec-runner.js";
import type { ExecOptions } from "../../runtime/environment-exec.js";
import { Capped, checkExecRequest, EXEC_TAG, KILL_TAGGED, watchExec } from "../e2b/sandbox-exec.js";
import { SYSTEM_PATH } from "../e2b/sandbox-user.js";
import type { PrimeApi } from "./prime-api.js";

/** How denv names Prime in what it says (ProviderMessages). */
export const PROVIDER = "Prime";

/**
 * One command in a Prime sandbox with the exec contract's semantics, through the sandbox's
 * command session: argv as given (no shell of denv's in between), as `user` (Prime runs a
 * command as any user of the image), in `cwd`, with the env asked; stdin whole before the command
 * reads it; a per-stream output cap; live output; a timeout (exit 124) or cancel (137) that kills
 * the command, then every process carrying the exec's tag in its environment (what it forked,
 * `setsid` or not; one that cleared its environment is left to the verify's stop of the agent).
 * No back-pressure (`onFlow` is not called) and no tty: the session streams, it does not pause.
 */
export async function execInPrime(
  api: PrimeApi,
  sandboxId: string,
  user: string,
  cwd: string | undefined,
  o: ExecOptions,
): Promise<RawExecResult> {
  checkExecRequest(o, PROVIDER);
  const started = Date.now();
  const stdin =
    o.stdin === undefined
      ? undefined
      : Buffer.isBuffer(o.stdin)
        ? o.stdin
        : await buffer(o.stdin as Readable);
  const tag = randomBytes(8).toString("hex");
  const limit = o.outputLimit ?? DEFAULT_OUTPUT_LIMIT;
  const out = new Capped(limit, o.collect ?? true);
  const err = new Capped(limit, o.collect ?? true);
  const stop = new AbortController();
  const watch = watchExec(o, () => stop.abort());
  let exitCode = 0;
  try {
    const r = await api.runCommand(sandboxId, o.cmd ?? ["sh", "-c", o.shell as string], {
      user,
      ...(cwd !== undefined ? { cwd } : {}),
      env: { ...o.env, [EXEC_TAG]: tag },
      ...(stdin !== undefined ? { stdin } : {}),
      collect: false,
      onStdout: (b) => {
        out.push(b);
        o.onStdout?.(b);
      },
      onStderr: (b) => {
        err.push(b);
        o.onStderr?.(b);
      },
      signal: stop.signal,
    });
    exitCode = r.exitCode;
  } catch (e) {
    // An abort is the timeout's or the cancel's, said by the exit code below.
    if (!stop.signal.aborted) throw e;
  } finally {
    watch.dispose();
  }
  const { timedOut, cancelled } = watch;
  if (timedOut || cancelled) await killTagged(api, sandboxId, tag);
  return {
    exitCode: watch.exitCode(exitCode),
    stdout: out.value(),
    stderr: err.value(),
    timedOut,
    truncated: out.truncated || err.truncated,
    cancelled,
    durationMs: Date.now() - started,
  };
}

/**
 * Kills, as root, every process whose environment holds the exec's tag (sandbox-exec.ts's
 * script, with root's PATH none of the agent's to write). What survives it is the agent's still:
 * the verify's stop of the agent kills every process that was not running when the sandbox was ready.
 */
async function killTagged(api: PrimeApi, sandboxId: string, tag: string): Promise<void> {
  await api
    .runCommand(sandboxId, ["/bin/sh", "-c", `export PATH=${SYSTEM_PATH}; ${KILL_TAGGED}`], {
      user: "root",
      cwd: "/",
      env: { DENV_KILL: tag },
    })
    .catch(() => undefined);
}
