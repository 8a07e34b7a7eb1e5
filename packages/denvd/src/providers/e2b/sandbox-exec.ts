import { randomBytes } from "node:crypto";
import type { Readable } from "node:stream";
import { buffer } from "node:stream/consumers";
import { DEFAULT_OUTPUT_LIMIT, DenvError, ExitCodes, ProviderMessages } from "@denv/spec";
import type { RawExecResult } from "../../exec-runner.js";
import type { ExecOptions } from "../../runtime/environment-exec.js";
import { PROVIDER } from "./check-plan.js";
import type { E2bSandbox } from "./e2b-sdk.js";
import { loadE2b } from "./e2b-sdk.js";
import { type SandboxUser, SYSTEM_PATH } from "./sandbox-user.js";

/** One word for a POSIX shell, whatever it holds. */
export function shellQuote(word: string): string {
  return `'${word.replaceAll("'", `'\\''`)}'`;
}

/** The variable each exec's processes carry, with a value of that exec's own. */
export const EXEC_TAG = "DENV_EXEC";

/**
 * Kills, as root, every process whose environment holds the tag, in rounds until none is left
 * (what forked between a listing and its kill is caught by the next); at most ten rounds.
 */
async function killTagged(sbx: E2bSandbox, tag: string): Promise<void> {
  // What survives ten rounds (or a failed call) is the agent's still: the verify's stop of the
  // agent kills every process that was not running when the sandbox was ready.
  await sbx.commands
    .run(`export PATH=${SYSTEM_PATH}; ${KILL_TAGGED}`, {
      user: "root",
      cwd: "/",
      envs: { DENV_KILL: tag },
      timeoutMs: 0,
    })
    .catch(() => undefined);
}

/** The script of killTagged, for a shell whose DENV_KILL holds the tag. */
export const KILL_TAGGED = `want="${EXEC_TAG}=$DENV_KILL"; round=0
while [ "$round" -lt 10 ]; do
  found=""
  for d in /proc/[0-9]*; do
    [ "\${d#/proc/}" = "$$" ] && continue
    { tr '\\0' '\\n' < "$d/environ"; } 2>/dev/null | grep -qxF "$want" && found="$found \${d#/proc/}"
  done
  [ -z "$found" ] && exit 0
  kill -9 $found 2>/dev/null; round=$((round + 1)); sleep 0.1
done
exit 1`;

/**
 * An exec's deadline and cancel: `kill` when the timeout passes or the signal aborts, which of
 * the two happened, and the exit code the contract gives then (124 for a timeout, 137 for a
 * cancel). `dispose` once the command has ended.
 */
export function watchExec(
  o: Pick<ExecOptions, "timeout" | "signal">,
  kill: () => void,
): { timedOut: boolean; cancelled: boolean; exitCode(code: number): number; dispose(): void } {
  const state = {
    timedOut: false,
    cancelled: false,
    exitCode: (code: number) => (state.timedOut ? ExitCodes.timedOut : state.cancelled ? 137 : code),
    dispose: () => {
      if (timer) clearTimeout(timer);
      o.signal?.removeEventListener("abort", onAbort);
    },
  };
  const timer =
    o.timeout !== undefined
      ? setTimeout(
          () => {
            state.timedOut = true;
            kill();
          },
          Math.round(o.timeout * 1000),
        )
      : undefined;
  const onAbort = () => {
    state.cancelled = true;
    kill();
  };
  if (o.signal?.aborted) onAbort();
  else o.signal?.addEventListener("abort", onAbort, { once: true });
  return state;
}

/** Keeps the first `limit` bytes of a stream and says whether more came. */
export class Capped {
  private chunks: Buffer[] = [];
  private size = 0;
  truncated = false;
  constructor(
    private readonly limit: number,
    private readonly keep: boolean,
  ) {}
  push(b: Buffer): void {
    if (!this.keep) return;
    const room = this.limit - this.size;
    if (b.length > room) this.truncated = true;
    if (room <= 0) return;
    const part = b.length > room ? b.subarray(0, room) : b;
    this.chunks.push(part);
    this.size += part.length;
  }
  value(): Buffer {
    return Buffer.concat(this.chunks);
  }
}

/**
 * What every provider's exec refuses before it runs anything: both or neither of `cmd` and
 * `shell`, and a tty (no provider runtime opens PTYs yet), each in one line naming `provider`.
 */
export function checkExecRequest(o: Pick<ExecOptions, "cmd" | "shell" | "tty">, provider: string): void {
  if ((o.cmd === undefined) === (o.shell === undefined)) {
    throw new DenvError(
      "invalid_request",
      "give exactly one of 'cmd' (argv) and 'shell' (a string for sh -c)",
    );
  }
  if (o.tty) {
    throw new DenvError(
      "invalid_request",
      ProviderMessages.unsupportedOption(provider, "tty", `the runtime does not open ${provider} PTYs yet`),
    );
  }
}

/**
 * One command in the sandbox with the exec contract's semantics, through envd
 * (`sandbox.commands`): argv quoted into one line that envd's shell `exec`s, so that the command
 * is the process envd started; the user, cwd and env asked; stdin; a per-stream output cap; live
 * output; a timeout that kills the command (exit 124, `timedOut`).
 *
 * What differs from denvd's Docker runtime, by E2B's API: stdin is written to a file in the
 * sandbox (as the user, removed before the command starts) and read from there, so it is
 * whole before the command starts rather than streamed; output arrives as text (envd's stream
 * decoded as UTF-8 by the SDK); a timeout or cancel kills the process envd started, then every
 * process that carries the exec's tag in its environment (what it forked, `setsid` or not; a
 * process that cleared its environment is not found, and the verify's stop kills it); there is no
 * back-pressure (`onFlow` is not called).
 */
export async function execInSandbox(
  sbx: E2bSandbox,
  user: SandboxUser,
  cwd: string | undefined,
  o: ExecOptions,
): Promise<RawExecResult> {
  checkExecRequest(o, PROVIDER);
  const { CommandExitError } = await loadE2b();
  const started = Date.now();
  const argv = o.cmd ?? ["sh", "-c", o.shell as string];
  let line = `exec ${argv.map(shellQuote).join(" ")}`;
  if (o.stdin !== undefined) {
    const data = Buffer.isBuffer(o.stdin) ? o.stdin : await buffer(o.stdin as Readable);
    const file = `/tmp/.denv-stdin-${randomBytes(8).toString("hex")}`;
    await sbx.files.write(file, new Uint8Array(data).buffer, { user: user.name });
    line = `exec <${shellQuote(file)} && rm -f -- ${shellQuote(file)} && ${line}`;
  }
  // Every process of the command inherits the tag, and a timeout or cancel kills them by it.
  const tag = randomBytes(8).toString("hex");
  const limit = o.outputLimit ?? DEFAULT_OUTPUT_LIMIT;
  const out = new Capped(limit, o.collect ?? true);
  const err = new Capped(limit, o.collect ?? true);
  const handle = await sbx.commands.run(line, {
    background: true,
    user: user.name,
    ...(cwd !== undefined ? { cwd } : {}),
    envs: { ...o.env, [EXEC_TAG]: tag },
    // denvd keeps the time itself (below); envd's own deadline would end the call, not say why.
    timeoutMs: 0,
    onStdout: (text: string) => {
      const b = Buffer.from(text, "utf8");
      out.push(b);
      o.onStdout?.(b);
    },
    onStderr: (text: string) => {
      const b = Buffer.from(text, "utf8");
      err.push(b);
      o.onStderr?.(b);
    },
  });
  const watch = watchExec(o, () => void handle.kill().catch(() => false));
  let exitCode: number;
  try {
    exitCode = (await handle.wait()).exitCode;
  } catch (e) {
    if (!(e instanceof CommandExitError)) throw e;
    exitCode = e.exitCode;
  } finally {
    watch.dispose();
  }
  const { timedOut, cancelled } = watch;
  if (timedOut || cancelled) await killTagged(sbx, tag);
  exitCode = watch.exitCode(exitCode);
  return {
    exitCode,
    stdout: out.value(),
    stderr: err.value(),
    timedOut,
    truncated: out.truncated || err.truncated,
    cancelled,
    durationMs: Date.now() - started,
  };
}
