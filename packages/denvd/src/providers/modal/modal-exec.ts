import { randomBytes } from "node:crypto";
import type { Readable } from "node:stream";
import { DEFAULT_OUTPUT_LIMIT } from "@denv/spec";
import type { Sandbox } from "modal";
import type { RawExecResult } from "../../exec-runner.js";
import type { ExecOptions } from "../../runtime/environment-exec.js";
import { Capped, checkExecRequest, EXEC_TAG, KILL_TAGGED, watchExec } from "../e2b/sandbox-exec.js";
import { type PasswdUser, passwdUser, SETPRIV, SYSTEM_PATH } from "../e2b/sandbox-user.js";
import { PROVIDER } from "./modal-dockerfile.js";

/** Who a command runs as in a Modal sandbox: resolved from the sandbox's /etc/passwd. */
export type ModalUser = PasswdUser;

/**
 * Resolves `user` (a name or a uid in any spelling) through the sandbox's /etc/passwd, which the
 * caller read as root: a uid without a passwd entry and a group are refused (lookupUser's lines).
 */
export function modalUser(passwd: string, user: string): ModalUser {
  return passwdUser(passwd, user, PROVIDER);
}

/**
 * One command in a Modal sandbox with the exec contract's semantics, through the SDK's
 * `sandbox.exec`. Modal's exec takes no user (TaskExecStart has none: every command runs as the
 * sandbox's own user, root in the sandboxes denv makes), so the command is
 * `/usr/bin/setpriv --reuid --regid --init-groups --no-new-privs -- argv`: root starts the system's
 * setpriv by its path, never a program of the agent's, and setpriv becomes the user (its groups
 * from /etc/group, no way back to root through setuid programs: no-new-privileges, as denvd's
 * own containers run the agent) and execs argv, so the command is that process. HOME, USER and
 * LOGNAME are the user's; `cwd` is Modal's workdir; the env asked, and the exec's tag, which every
 * process it forks inherits. Stdin streams in (Modal's stdin write stream) and is closed at its
 * end; stdout and stderr stream out as Modal sends them, each held to the output cap. A timeout
 * (exit 124) or cancel (137) kills, as root, every process carrying the tag (what it forked,
 * `setsid` or not; one that cleared its environment is left to the verify's stop of the agent):
 * Modal has no call that kills one exec. No back-pressure (`onFlow` is not called) and no tty.
 */
export async function execInModal(
  sb: Sandbox,
  user: ModalUser,
  cwd: string | undefined,
  o: ExecOptions,
): Promise<RawExecResult> {
  checkExecRequest(o, PROVIDER);
  const started = Date.now();
  const argv = o.cmd ?? ["sh", "-c", o.shell as string];
  const tag = randomBytes(8).toString("hex");
  const limit = o.outputLimit ?? DEFAULT_OUTPUT_LIMIT;
  const out = new Capped(limit, o.collect ?? true);
  const err = new Capped(limit, o.collect ?? true);
  const p = await sb.exec(
    [SETPRIV, `--reuid=${user.uid}`, `--regid=${user.gid}`, "--init-groups", "--no-new-privs", "--", ...argv],
    {
      mode: "binary",
      ...(cwd !== undefined ? { workdir: cwd } : {}),
      env: { HOME: user.home, USER: user.name, LOGNAME: user.name, ...o.env, [EXEC_TAG]: tag },
    },
  );
  const watch = watchExec(o, () => void killTagged(sb, tag));
  try {
    const [code] = await Promise.all([
      p.wait(),
      feed(p.stdin, o.stdin),
      drain(p.stdout, (b) => {
        out.push(b);
        o.onStdout?.(b);
      }),
      drain(p.stderr, (b) => {
        err.push(b);
        o.onStderr?.(b);
      }),
    ]);
    return {
      exitCode: watch.exitCode(code),
      stdout: out.value(),
      stderr: err.value(),
      timedOut: watch.timedOut,
      truncated: out.truncated || err.truncated,
      cancelled: watch.cancelled,
      durationMs: Date.now() - started,
    };
  } finally {
    watch.dispose();
  }
}

/**
 * Writes stdin and closes it (a command waiting for input would never end); without stdin, only
 * closes. A command that exits before reading it all ends the write, which is no failure.
 */
async function feed(stdin: WritableStream<Uint8Array>, data: ExecOptions["stdin"]): Promise<void> {
  const writer = stdin.getWriter();
  try {
    if (data !== undefined) {
      const chunks: AsyncIterable<Buffer> | Buffer[] = Buffer.isBuffer(data) ? [data] : (data as Readable);
      for await (const chunk of chunks) await writer.write(new Uint8Array(chunk));
    }
    await writer.close();
  } catch {
    // The command ended first (or the sandbox went); its exit says what happened.
  } finally {
    writer.releaseLock();
  }
}

async function drain(stream: ReadableStream<Uint8Array>, on: (b: Buffer) => void): Promise<void> {
  const reader = stream.getReader();
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (value && value.length > 0) on(Buffer.from(value));
      if (done) return;
    }
  } finally {
    reader.releaseLock();
  }
}

/**
 * Kills, as root (the sandbox's own user), every process whose environment holds the exec's tag
 * (sandbox-exec.ts's script, with a PATH of system directories the agent cannot write). What
 * survives it is the agent's still: the verify's stop of the agent kills every process that was
 * not running when the sandbox was ready.
 */
export async function killTagged(sb: Sandbox, tag: string): Promise<void> {
  try {
    const p = await sb.exec(["/bin/sh", "-c", `export PATH=${SYSTEM_PATH}; ${KILL_TAGGED}`], {
      workdir: "/",
      env: { DENV_KILL: tag },
      stdout: "ignore",
      stderr: "ignore",
    });
    await p.wait();
  } catch {
    // What a failed kill leaves is the verify's to stop with the agent's processes (above).
  }
}
