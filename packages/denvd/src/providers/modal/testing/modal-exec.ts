import { EventEmitter } from "node:events";
import { ServerError, Status } from "nice-grpc";
import type { DoubleDocker, Spawned } from "../../testing/double-docker.js";
import { FS_TOOLS_PATH, fsToolsArgv } from "./modal-fs-tools.js";
import type { Msg } from "./modal-wire.js";

/** A command exec'd in a sandbox: its output kept whole, so a reader can start at any offset. */
interface Exec {
  process: Spawned;
  out: [Buffer[], Buffer[]];
  code?: number;
  changed: EventEmitter;
  stdinOffset: number;
  stdinClosed: boolean;
}

/**
 * The double's TaskCommandRouter (the per-sandbox exec service the SDK dials with the JWT from
 * TaskGetCommandRouterAccess): starts commands through the engine, serves their stdout and stderr
 * from an offset, takes stdin by offset, and reports the exit code.
 */
export class ModalExecs {
  private readonly execs = new Map<string, Exec>();

  constructor(
    private readonly docker: DoubleDocker,
    /** The container of a task, or an error the SDK understands. */
    private readonly containerOf: (taskId: string) => string,
  ) {}

  async start(r: Msg): Promise<Msg> {
    const container = this.containerOf(r.taskId);
    if (this.execs.has(r.execId)) throw new ServerError(Status.ALREADY_EXISTS, `exec ${r.execId} exists`);
    const env: Record<string, string> = { ...r.env };
    for (const s of r.secretSources as Msg[]) Object.assign(env, s.env?.contents ?? {});
    const given = r.commandArgs as string[];
    const argv = given[0] === FS_TOOLS_PATH ? fsToolsArgv(given[1] ?? "{}") : given;
    const out: Exec["out"] = [[], []];
    const changed = new EventEmitter();
    // Modal kills a command at its timeout; `timeout -s KILL` makes the engine do it (exit 137).
    const cmd = r.timeoutSecs > 0 ? ["timeout", "-s", "KILL", String(r.timeoutSecs), ...argv] : argv;
    const process = await this.docker.spawn(container, {
      cmd,
      user: "",
      ...(r.workdir ? { cwd: r.workdir } : {}),
      env,
      stdin: true,
      onStdout: (c) => {
        if (r.stdoutConfig !== 0) out[0].push(c);
        changed.emit("changed");
      },
      onStderr: (c) => {
        if (r.stderrConfig !== 0) out[1].push(c);
        changed.emit("changed");
      },
    });
    const exec: Exec = { process, out, changed, stdinOffset: 0, stdinClosed: false };
    this.execs.set(r.execId, exec);
    void process.exited.then((code) => {
      exec.code = code;
      changed.emit("changed");
    });
    return {};
  }

  /** Streams one of the exec's outputs from `offset` until the command ended and all is sent. */
  async *read(r: Msg, signal: AbortSignal): AsyncGenerator<Msg> {
    const exec = this.get(r.execId);
    const chunks = exec.out[r.fileDescriptor === 1 ? 1 : 0];
    let offset = Number(r.offset);
    for (;;) {
      const all = Buffer.concat(chunks);
      if (all.length > offset) {
        yield { data: all.subarray(offset) };
        offset = all.length;
        continue;
      }
      if (exec.code !== undefined) return;
      await new Promise<void>((resolve) => {
        const done = () => {
          exec.changed.off("changed", done);
          signal.removeEventListener("abort", done);
          resolve();
        };
        exec.changed.on("changed", done);
        signal.addEventListener("abort", done);
      });
      if (signal.aborted) return;
    }
  }

  stdin(r: Msg): Msg {
    this.write(this.get(r.execId), Number(r.offset), Buffer.from(r.data as Uint8Array), r.eof);
    return {};
  }

  /** The streamed form of stdin: a start (exec and offset), data, and an end that closes it. */
  async stdinStream(requests: AsyncIterable<Msg>): Promise<Msg> {
    let exec: Exec | undefined;
    let offset = 0;
    for await (const r of requests) {
      if (r.start) {
        exec = this.get(r.start.execId);
        offset = Number(r.start.offset);
      }
      if (!exec) throw new ServerError(Status.INVALID_ARGUMENT, "the stream must begin with its start");
      const data = Buffer.from(r.data as Uint8Array);
      this.write(exec, offset, data, r.end !== undefined);
      offset += data.length;
    }
    return {};
  }

  stdinStatus(r: Msg): Msg {
    const exec = this.get(r.execId);
    return { numBytesWritten: exec.stdinOffset, closed: exec.stdinClosed };
  }

  /** Writes are retried by offset: only the bytes not taken before reach the process. */
  private write(exec: Exec, offset: number, data: Buffer, eof: boolean): void {
    const fresh = data.subarray(Math.max(0, exec.stdinOffset - offset));
    if (exec.stdinClosed) {
      if (fresh.length > 0) throw new ServerError(Status.FAILED_PRECONDITION, "stdin is closed");
      return;
    }
    if (fresh.length > 0) exec.process.write(fresh);
    exec.stdinOffset = Math.max(exec.stdinOffset, offset + data.length);
    if (eof) {
      exec.stdinClosed = true;
      exec.process.end();
    }
  }

  poll(r: Msg): Msg {
    const exec = this.get(r.execId);
    return exec.code === undefined ? {} : { code: exec.code };
  }

  async wait(r: Msg): Promise<Msg> {
    const exec = this.get(r.execId);
    return { code: await exec.process.exited };
  }

  private get(execId: string): Exec {
    const exec = this.execs.get(execId);
    if (!exec) throw new ServerError(Status.NOT_FOUND, `exec ${execId} not found`);
    return exec;
  }
}
