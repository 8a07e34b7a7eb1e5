import { type IncomingMessage, request } from "node:http";
import { buffer } from "node:stream/consumers";
import tar from "tar-stream";

/**
 * The few Docker Engine API calls the E2B test double makes, over the engine's unix socket with
 * node:http (cp does not depend on dockerode, and these calls are small). Engine JSON stays in
 * this file: callers get plain values.
 */
export class EngineError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

/** What one exec gave back: its exit code and its whole output. */
interface ExecResult {
  exitCode: number;
  stdout: Buffer;
  stderr: Buffer;
}

interface ExecOptions {
  cmd: string[];
  user?: string;
  cwd?: string;
  env?: Record<string, string>;
  onStdout?: (chunk: Buffer) => void;
  onStderr?: (chunk: Buffer) => void;
  /** Called once the process runs, with the engine's exec id (for inspect and signals). */
  onStarted?: (execId: string) => void;
}

/** How a build ended: the image it made, or the builder's error. */
export type BuildResult = { ok: true; imageId: string } | { ok: false; error: string };

export class Engine {
  constructor(private readonly socketPath = "/var/run/docker.sock") {}

  private raw(method: string, path: string, body?: Buffer, contentType?: string): Promise<IncomingMessage> {
    return new Promise((resolve, reject) => {
      const req = request({
        socketPath: this.socketPath,
        method,
        path,
        headers: body
          ? { "content-type": contentType ?? "application/json", "content-length": body.length }
          : {},
      });
      req.on("response", resolve);
      req.on("error", reject);
      req.end(body);
    });
  }

  /** One JSON call; a status of 300 or more throws EngineError with the engine's message. */
  async call<T = unknown>(method: string, path: string, body?: unknown, contentType?: string): Promise<T> {
    const payload =
      body === undefined ? undefined : Buffer.isBuffer(body) ? body : Buffer.from(JSON.stringify(body));
    const res = await this.raw(method, path, payload, contentType);
    const chunks: Buffer[] = [];
    for await (const c of res) chunks.push(c as Buffer);
    const text = Buffer.concat(chunks).toString();
    const status = res.statusCode ?? 0;
    if (status >= 300) {
      let message = text;
      try {
        message = (JSON.parse(text) as { message?: string }).message ?? text;
      } catch {}
      throw new EngineError(status, `${method} ${path}: ${status} ${message}`);
    }
    return (text === "" ? undefined : JSON.parse(text)) as T;
  }

  /**
   * Runs a process in a container with `docker exec` semantics and returns when it exits; its
   * output arrives demultiplexed (the engine frames it: 1 byte stream, 3 zero, 4 bytes length).
   */
  async exec(container: string, o: ExecOptions): Promise<ExecResult> {
    const { Id } = await this.call<{ Id: string }>("POST", `/containers/${container}/exec`, {
      AttachStdout: true,
      AttachStderr: true,
      Cmd: o.cmd,
      User: o.user ?? "",
      WorkingDir: o.cwd ?? "",
      Env: Object.entries(o.env ?? {}).map(([k, v]) => `${k}=${v}`),
    });
    const res = await this.raw(
      "POST",
      `/exec/${Id}/start`,
      Buffer.from(JSON.stringify({ Detach: false, Tty: false })),
    );
    if ((res.statusCode ?? 0) >= 300)
      throw new EngineError(res.statusCode ?? 0, `exec start: ${res.statusCode}`);
    o.onStarted?.(Id);
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    let pending = Buffer.alloc(0);
    for await (const c of res) {
      pending = Buffer.concat([pending, c as Buffer]);
      while (pending.length >= 8) {
        const size = pending.readUInt32BE(4);
        if (pending.length < 8 + size) break;
        const frame = pending.subarray(8, 8 + size);
        if (pending[0] === 2) {
          err.push(frame);
          o.onStderr?.(frame);
        } else {
          out.push(frame);
          o.onStdout?.(frame);
        }
        pending = pending.subarray(8 + size);
      }
    }
    const info = await this.call<{ ExitCode: number | null }>("GET", `/exec/${Id}/json`);
    return { exitCode: info.ExitCode ?? -1, stdout: Buffer.concat(out), stderr: Buffer.concat(err) };
  }

  /** The host pid of a running exec (0 before it starts or after it ends). */
  async execPid(execId: string): Promise<number> {
    return (await this.call<{ Pid: number }>("GET", `/exec/${execId}/json`)).Pid;
  }

  /** Starts a process in a container and returns at once, its output going nowhere. */
  async spawn(container: string, o: Omit<ExecOptions, "onStdout" | "onStderr" | "onStarted">): Promise<void> {
    const { Id } = await this.call<{ Id: string }>("POST", `/containers/${container}/exec`, {
      Cmd: o.cmd,
      User: o.user ?? "",
      WorkingDir: o.cwd ?? "",
      Env: Object.entries(o.env ?? {}).map(([k, v]) => `${k}=${v}`),
    });
    await this.call("POST", `/exec/${Id}/start`, { Detach: true, Tty: false });
  }

  /** Whether the engine has an image of that name or id (never looked for in a registry). */
  async hasImage(ref: string): Promise<boolean> {
    try {
      await this.call("GET", `/images/${encodeURIComponent(ref)}/json`);
      return true;
    } catch (e) {
      if (e instanceof EngineError && e.status === 404) return false;
      throw e;
    }
  }

  /**
   * `docker build` of a tar context (its Dockerfile at the root) with the classic builder
   * (`version=1`): it needs no BuildKit session and prints each instruction as "Step N/M : ..."
   * followed by that instruction's output, which callers map back to their own steps. Every
   * instruction runs (`nocache`), and intermediate containers go even when a step fails.
   * `onOutput` gets the builder's text as it comes, not split into lines.
   */
  async build(context: Buffer, tag: string, onOutput: (text: string) => void): Promise<BuildResult> {
    const res = await this.raw(
      "POST",
      `/build?version=1&t=${encodeURIComponent(tag)}&rm=1&forcerm=1&nocache=1`,
      context,
      "application/x-tar",
    );
    let pending = "";
    let error: string | undefined;
    let imageId: string | undefined;
    const take = (line: string) => {
      if (line.trim() === "") return;
      const m = JSON.parse(line) as {
        stream?: string;
        error?: string;
        message?: string;
        aux?: { ID?: string };
      };
      if (m.stream) onOutput(m.stream);
      // A stream ends in {"error"} when a step fails; a refused request is one {"message"}.
      if (m.error ?? m.message) error = m.error ?? m.message;
      if (m.aux?.ID) imageId = m.aux.ID;
    };
    for await (const c of res) {
      pending += (c as Buffer).toString();
      const lines = pending.split("\n");
      pending = lines.pop() ?? "";
      for (const line of lines) take(line);
    }
    take(pending);
    const status = res.statusCode ?? 0;
    if (status >= 300) return { ok: false, error: error ?? `POST /build: ${status}` };
    if (error !== undefined) return { ok: false, error };
    return { ok: true, imageId: imageId ?? tag };
  }

  /**
   * Removes every image (intermediate ones too) with a label. An image with children cannot go
   * before them, and removing a child may take its untagged parents along, so this goes round
   * until a pass removes nothing more; what is then left is an error.
   */
  async removeImages(label: string): Promise<void> {
    const filter = encodeURIComponent(JSON.stringify({ label: [label] }));
    for (;;) {
      const images = await this.call<Array<{ Id: string }>>("GET", `/images/json?all=1&filters=${filter}`);
      if (images.length === 0) return;
      const errors: unknown[] = [];
      for (const i of images)
        await this.call("DELETE", `/images/${i.Id}?force=1`).catch((e: unknown) => {
          if (!(e instanceof EngineError && e.status === 404)) errors.push(e);
        });
      if (errors.length === images.length)
        throw new AggregateError(errors, `cannot remove the images of ${label}`);
    }
  }

  /** Unpacks a tar archive into a directory of a container, as `docker cp` does. */
  async putArchive(container: string, dir: string, tar: Buffer): Promise<void> {
    await this.call(
      "PUT",
      `/containers/${container}/archive?path=${encodeURIComponent(dir)}`,
      tar,
      "application/x-tar",
    );
  }
}

/** A one-file tar archive whose entry belongs to uid:gid, so the file lands owned by them. */
export async function tarOneFile(
  name: string,
  data: Buffer,
  uid: number,
  gid: number,
  mode = 0o644,
): Promise<Buffer> {
  const pack = tar.pack();
  pack.entry({ name, size: data.length, mode, uid, gid }, data);
  pack.finalize();
  return buffer(pack);
}
