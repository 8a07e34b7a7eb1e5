import { randomUUID } from "node:crypto";
import { ApiError } from "./daytona-api-error.js";
import type { DaytonaDocker } from "./daytona-docker.js";
import type { Where } from "./daytona-files.js";

/** The SDK's markers (Process.js STDOUT_PREFIX_BYTES / STDERR_PREFIX_BYTES) in a followed log. */
export const STDOUT_PREFIX = Buffer.from([1, 1, 1]);
export const STDERR_PREFIX = Buffer.from([2, 2, 2]);

interface Chunk {
  stderr: boolean;
  data: Buffer;
}

interface Command {
  id: string;
  command: string;
  exitCode?: number;
  chunks: Chunk[];
  followers: Set<(c: Chunk | null) => void>;
}

interface Session {
  id: string;
  sandboxId: string;
  commands: Map<string, Command>;
}

/**
 * Each command runs in a fresh `sh` (its own `docker exec`, as the sandbox user), which first
 * takes the session's state, the exported variables and the working directory the previous
 * command left, and saves them when the command ends: a session behaves as one shell would for
 * `cd` and `export` (not for unexported variables, functions or aliases). The state lives in the
 * sandbox under /tmp/.daytona-double-sessions/<session id>.
 */
const SESSION_SHELL = [
  '__dd_c=$1; __dd_d=/tmp/.daytona-double-sessions/$2; mkdir -p "$__dd_d"; set --',
  '[ -f "$__dd_d/env" ] && . "$__dd_d/env"',
  '[ -f "$__dd_d/cwd" ] && cd "$(cat "$__dd_d/cwd")"',
  'eval "$__dd_c"',
  "__dd_rc=$?",
  'export -p > "$__dd_d/env.new" && mv "$__dd_d/env.new" "$__dd_d/env"; pwd > "$__dd_d/cwd"',
  "exit $__dd_rc",
].join("\n");

/**
 * The toolbox's sessions (`sandbox.process.*Session*`). A command's output is kept whole, per
 * stream and interleaved; `runAsync` commands go on in the background until they exit or the
 * sandbox stops. Deleting a session forgets it; its background commands are not killed.
 */
export class Sessions {
  private readonly all = new Map<string, Session>();

  constructor(private readonly docker: DaytonaDocker) {}

  private key(sandboxId: string, id: string): string {
    return `${sandboxId}/${id}`;
  }

  create(w: Where, id: unknown): void {
    if (typeof id !== "string" || id === "") throw new ApiError(400, "sessionId is required");
    if (this.all.has(this.key(w.sb.id, id))) throw new ApiError(409, `session ${id} already exists`);
    this.all.set(this.key(w.sb.id, id), { id, sandboxId: w.sb.id, commands: new Map() });
  }

  get(w: Where, id: string): Session {
    const s = this.all.get(this.key(w.sb.id, id));
    if (!s) throw new ApiError(404, `session ${id} not found`, "PROCESS_NOT_FOUND");
    return s;
  }

  delete(w: Where, id: string): void {
    this.get(w, id);
    this.all.delete(this.key(w.sb.id, id));
  }

  /** A sandbox that stops or goes takes its sessions with it (its processes are gone). */
  dropSandbox(sandboxId: string): void {
    for (const [k, s] of this.all) if (s.sandboxId === sandboxId) this.all.delete(k);
  }

  list(w: Where): object[] {
    return [...this.all.values()].filter((s) => s.sandboxId === w.sb.id).map((s) => this.dto(s));
  }

  dto(s: Session): object {
    return { sessionId: s.id, commands: [...s.commands.values()].map((c) => this.commandDto(c)) };
  }

  commandDto(c: Command): object {
    return { id: c.id, command: c.command, ...(c.exitCode !== undefined ? { exitCode: c.exitCode } : {}) };
  }

  command(w: Where, sessionId: string, cmdId: string): Command {
    const c = this.get(w, sessionId).commands.get(cmdId);
    if (!c) throw new ApiError(404, `command ${cmdId} not found`, "PROCESS_NOT_FOUND");
    return c;
  }

  /** POST /process/session/{id}/exec: SessionExecuteResponse, at once when `runAsync`. */
  async execute(w: Where, sessionId: string, body: Record<string, unknown>): Promise<object> {
    const session = this.get(w, sessionId);
    if (typeof body.command !== "string") throw new ApiError(400, "command is required");
    const c: Command = { id: randomUUID(), command: body.command, chunks: [], followers: new Set() };
    session.commands.set(c.id, c);
    const push = (stderr: boolean) => (data: Buffer) => {
      const chunk = { stderr, data };
      c.chunks.push(chunk);
      for (const f of c.followers) f(chunk);
    };
    const run = this.docker
      .exec(w.container, {
        cmd: ["sh", "-c", SESSION_SHELL, "sh", body.command, sessionId],
        user: w.sb.user,
        cwd: w.sb.workdir,
        onStdout: push(false),
        onStderr: push(true),
      })
      .then(
        (r) => r.exitCode,
        () => -1,
      )
      .then((code) => {
        c.exitCode = code;
        for (const f of c.followers) f(null);
        c.followers.clear();
      });
    if (body.runAsync === true || body.async === true) {
      void run;
      return { cmdId: c.id };
    }
    await run;
    return { cmdId: c.id, exitCode: c.exitCode, ...this.logs(c) };
  }

  /** SessionCommandLogsResponse: the output so far, per stream and interleaved. */
  logs(c: Command): { output: string; stdout: string; stderr: string } {
    const join = (f: (x: Chunk) => boolean) =>
      Buffer.concat(c.chunks.filter(f).map((x) => x.data)).toString();
    return { output: join(() => true), stdout: join((x) => !x.stderr), stderr: join((x) => x.stderr) };
  }

  /**
   * A followed log: the output so far then each new chunk, each behind its stream's marker, and
   * `end` once the command exited.
   */
  follow(c: Command, send: (frame: Buffer) => void, end: () => void): () => void {
    const frame = (x: Chunk) => send(Buffer.concat([x.stderr ? STDERR_PREFIX : STDOUT_PREFIX, x.data]));
    for (const x of c.chunks) frame(x);
    if (c.exitCode !== undefined) {
      end();
      return () => undefined;
    }
    const on = (x: Chunk | null) => (x ? frame(x) : end());
    c.followers.add(on);
    return () => c.followers.delete(on);
  }
}
