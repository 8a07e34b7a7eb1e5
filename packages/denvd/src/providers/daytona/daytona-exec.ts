import { randomBytes } from "node:crypto";
import type { Readable } from "node:stream";
import { buffer } from "node:stream/consumers";
import { DEFAULT_OUTPUT_LIMIT, DenvError } from "@denv/spec";
import type { RawExecResult } from "../../exec-runner.js";
import type { ExecOptions } from "../../runtime/environment-exec.js";
import {
  Capped,
  checkExecRequest,
  EXEC_TAG,
  KILL_TAGGED,
  shellQuote,
  watchExec,
} from "../e2b/sandbox-exec.js";
import { SYSTEM_PATH } from "../e2b/sandbox-user.js";
import { PROVIDER } from "./daytona-host.js";
import type { DaytonaSandbox } from "./daytona-sdk.js";

/**
 * A script of denvd's own in the sandbox (Daytona's `executeCommand`), as the sandbox's one user:
 * its exit code and output (stdout and stderr together, as Daytona returns them).
 */
export async function runScript(
  sbx: DaytonaSandbox,
  script: string,
  env: Record<string, string> = {},
): Promise<{ exitCode: number; output: string }> {
  const r = await sbx.process.executeCommand(script, "/", env, 0);
  return { exitCode: r.exitCode, output: r.result };
}

/**
 * runScript for denvd's own tools (tar, mkdir, chown, setpriv's cat): with SYSTEM_PATH, never a
 * directory the image gave its users, where root runs them in a verify's sandbox.
 */
export function runTool(
  sbx: DaytonaSandbox,
  script: string,
  env: Record<string, string> = {},
): Promise<{ exitCode: number; output: string }> {
  return runScript(sbx, `export PATH=${SYSTEM_PATH}; ${script}`, env);
}

/**
 * One command in the sandbox with the exec contract's semantics, through a Daytona session of its
 * own: argv quoted into one line the session's shell `exec`s, the cwd and env asked, stdin, a
 * per-stream output cap, live output (the session's log stream, stdout and stderr apart), and a
 * timeout that kills the command and what it forked (exit 124, `timedOut`).
 *
 * What differs from denvd's Docker runtime, by Daytona's API: every command runs as the
 * sandbox's one OS user (Daytona has no per-command user); stdin is written to a file first, so
 * it is whole before the command starts; output arrives as text; a timeout or cancel kills every
 * process that carries the exec's tag in its environment, as that user.
 */
export async function execInDaytona(
  sbx: DaytonaSandbox,
  cwd: string | undefined,
  o: ExecOptions,
): Promise<RawExecResult> {
  checkExecRequest(o, PROVIDER);
  const started = Date.now();
  const tag = randomBytes(8).toString("hex");
  const argv = o.cmd ?? ["sh", "-c", o.shell as string];
  const env = { ...o.env, [EXEC_TAG]: tag };
  const parts = [
    ...(cwd !== undefined ? [`cd ${shellQuote(cwd)}`] : []),
    `export ${Object.entries(env)
      .map(([k, v]) => shellQuote(`${k}=${v}`))
      .join(" ")}`,
  ];
  if (o.stdin !== undefined) {
    const data = Buffer.isBuffer(o.stdin) ? o.stdin : await buffer(o.stdin as Readable);
    const file = `/tmp/.denv-stdin-${tag}`;
    await sbx.fs.uploadFile(data, file);
    parts.push(`exec <${shellQuote(file)}`, `rm -f -- ${shellQuote(file)}`);
  }
  const line = `${parts.join(" && ")} && exec ${argv.map(shellQuote).join(" ")}`;
  const limit = o.outputLimit ?? DEFAULT_OUTPUT_LIMIT;
  const out = new Capped(limit, o.collect ?? true);
  const err = new Capped(limit, o.collect ?? true);
  const session = `denv-exec-${tag}`;
  await sbx.process.createSession(session);
  try {
    const { cmdId } = await sbx.process.executeSessionCommand(session, { command: line, runAsync: true });
    const watch = watchExec(
      o,
      () => void runTool(sbx, KILL_TAGGED, { DENV_KILL: tag }).catch(() => undefined),
    );
    let exitCode: number;
    try {
      await sbx.process.getSessionCommandLogs(
        session,
        cmdId,
        (text) => {
          const b = Buffer.from(text, "utf8");
          out.push(b);
          o.onStdout?.(b);
        },
        (text) => {
          const b = Buffer.from(text, "utf8");
          err.push(b);
          o.onStderr?.(b);
        },
      );
      exitCode = await exitOf(sbx, session, cmdId);
    } finally {
      watch.dispose();
    }
    const { timedOut, cancelled } = watch;
    if (timedOut || cancelled) await runTool(sbx, KILL_TAGGED, { DENV_KILL: tag }).catch(() => undefined);
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
  } finally {
    await sbx.process.deleteSession(session).catch(() => undefined);
  }
}

/** The command's exit code once Daytona has it (the log stream can end a moment before). */
async function exitOf(sbx: DaytonaSandbox, session: string, cmdId: string): Promise<number> {
  for (let i = 0; ; i++) {
    const cmd = await sbx.process.getSessionCommand(session, cmdId);
    if (cmd.exitCode !== undefined && cmd.exitCode !== null) return cmd.exitCode;
    if (i === 100) throw new DenvError("docker", `${PROVIDER}: command ${cmdId} ended without an exit code`);
    await new Promise((r) => setTimeout(r, 50));
  }
}
