import { randomBytes } from "node:crypto";
import { ApiError } from "./daytona-api-error.js";
import type { DaytonaDocker } from "./daytona-docker.js";
import { ToolboxFiles, type Where } from "./daytona-files.js";
import type { Sandboxes } from "./daytona-sandboxes.js";
import { Sessions } from "./daytona-sessions.js";

/** What a toolbox route answers: JSON, raw bytes with their content type, or nothing. */
export type Reply =
  | { status: number; json: unknown }
  | { status: number; bytes: Buffer; contentType: string }
  | { status: number };

/** The daemon's default limit on `executeCommand`, in seconds (Daytona's: 360). */
const EXECUTE_TIMEOUT_S = 360;

/**
 * One pipe for both streams, as the daemon's CombinedOutput (so their order holds). Kills the
 * command's whole process group when its time is up, so that nothing it started keeps
 * the exec's output open; `$2` is the limit in seconds.
 */
const WITH_TIMEOUT = [
  'setsid sh -c "$1" 2>&1 & __dd_p=$!',
  // The watchdog in a process group of its own, so that its sleep goes with it.
  'setsid sh -c \'sleep "$1"; kill -9 -"$2"\' _ "$2" "$__dd_p" >/dev/null 2>&1 & __dd_w=$!',
  'wait "$__dd_p"; __dd_rc=$?',
  'kill -- -"$__dd_w" 2>/dev/null',
  "exit $__dd_rc",
].join("\n");

/**
 * Daytona's toolbox daemon for every sandbox of the double, at `<toolboxProxyUrl>/<sandboxId>/...`
 * (the SDK's base URL for `sandbox.process` and `sandbox.fs`): the process, session and file
 * routes, each a `docker exec` as the sandbox user. The daemon has no per-call user.
 */
export class Toolbox {
  readonly sessions: Sessions;
  private readonly files: ToolboxFiles;

  constructor(
    private readonly docker: DaytonaDocker,
    private readonly sandboxes: Sandboxes,
  ) {
    this.sessions = new Sessions(docker);
    this.files = new ToolboxFiles(docker);
  }

  /** The sandbox a toolbox path names, which must be started. */
  where(sandboxId: string): Where {
    const sb = this.sandboxes.find(sandboxId);
    const container = this.sandboxes.started(sb);
    this.sandboxes.touch(sb);
    return { sb, container };
  }

  async handle(method: string, rest: string, q: URLSearchParams, raw: Buffer, contentType: string, w: Where) {
    const json = (): Record<string, unknown> => {
      try {
        return raw.length > 0 ? (JSON.parse(raw.toString()) as Record<string, unknown>) : {};
      } catch {
        throw new ApiError(400, "request body is not JSON");
      }
    };
    const path = q.get("path") ?? "";
    const route = `${method} ${rest}`;
    const ok = (body: unknown): Reply => ({ status: 200, json: body });
    if (w.sb.machine) {
      const machines = this.sandboxes.machines;
      if (route !== "POST /process/execute" || !machines)
        throw new ApiError(
          400,
          `the double's Docker sandboxes answer POST /process/execute only, not ${route}`,
        );
      const body = json();
      if (typeof body.command !== "string" || body.command === "")
        throw new ApiError(400, "command is required");
      const timeoutS = Number(body.timeout ?? 0) > 0 ? Number(body.timeout) : EXECUTE_TIMEOUT_S;
      const envs = (body.envs ?? {}) as Record<string, string>;
      const r = await machines.execute(w.sb.id, body.command, { envs, timeoutS });
      return ok({ exitCode: r.exitCode, result: r.output });
    }
    if (route === "POST /process/execute") return ok(await this.execute(w, json()));
    if (route === "GET /user-home-dir" || route === "GET /work-dir") {
      const home = await this.docker.exec(w.container, {
        cmd: ["sh", "-c", 'printf %s "$HOME"'],
        user: w.sb.user,
      });
      return ok(route === "GET /work-dir" ? { dir: w.sb.workdir } : { dir: home.stdout.toString() });
    }
    if (route === "POST /process/session") {
      this.sessions.create(w, json().sessionId);
      return { status: 201 };
    }
    if (route === "GET /process/session") return ok(this.sessions.list(w));
    const s = /^\/process\/session\/([^/]+)(?:\/(exec)|\/command\/([^/]+)(\/logs)?)?$/.exec(rest);
    if (s) {
      const [, sid = "", exec, cmdId, logs] = s;
      if (method === "DELETE" && !exec && !cmdId) {
        this.sessions.delete(w, sid);
        return { status: 204 };
      }
      if (method === "GET" && !exec && !cmdId) return ok(this.sessions.dto(this.sessions.get(w, sid)));
      if (method === "POST" && exec) return ok(await this.sessions.execute(w, sid, json()));
      if (method === "GET" && cmdId && !logs)
        return ok(this.sessions.commandDto(this.sessions.command(w, sid, cmdId)));
      if (method === "GET" && cmdId && logs)
        return ok(this.sessions.logs(this.sessions.command(w, sid, cmdId)));
    }
    if (route === "GET /files") return ok(await this.files.list(w, path));
    if (route === "GET /files/info") return ok(await this.files.info(w, path));
    if (route === "POST /files/folder") {
      await this.files.createFolder(w, path, q.get("mode") ?? "");
      return { status: 201 };
    }
    if (route === "DELETE /files") {
      await this.files.remove(w, path, q.get("recursive") === "true");
      return { status: 204 };
    }
    if (route === "POST /files/permissions") {
      await this.files.setPermissions(w, path, q);
      return { status: 200 };
    }
    if (route === "GET /files/download")
      return {
        status: 200,
        bytes: await this.files.download(w, path),
        contentType: "application/octet-stream",
      };
    if (route === "POST /files/bulk-upload") {
      for (const f of uploads(parseMultipart(raw, contentType))) await this.files.upload(w, f.path, f.data);
      return { status: 200 };
    }
    if (route === "POST /files/bulk-download") return this.bulkDownload(w, json().paths);
    throw new ApiError(404, `no toolbox route ${method} ${rest}`);
  }

  /** POST /process/execute: the exit code and the output of both streams, interleaved. */
  private async execute(w: Where, body: Record<string, unknown>): Promise<object> {
    if (typeof body.command !== "string" || body.command === "")
      throw new ApiError(400, "command is required");
    const timeout = Number(body.timeout ?? 0) > 0 ? Number(body.timeout) : EXECUTE_TIMEOUT_S;
    const started = Date.now();
    const r = await this.docker.exec(w.container, {
      cmd: ["sh", "-c", WITH_TIMEOUT, "sh", body.command, String(timeout)],
      user: w.sb.user,
      cwd: typeof body.cwd === "string" && body.cwd !== "" ? body.cwd : w.sb.workdir,
      env: (body.envs ?? {}) as Record<string, string>,
    });
    if (r.exitCode === 137 && Date.now() - started >= timeout * 1000)
      throw new ApiError(408, "command execution timeout", "PROCESS_EXECUTION_TIMEOUT");
    return { exitCode: r.exitCode, result: r.output.toString() };
  }

  /**
   * A multipart/form-data answer with one part per path: `file` with its bytes, or `error` with
   * a JSON body; each part's filename is the path asked for (the SDK matches parts by it).
   */
  private async bulkDownload(w: Where, paths: unknown): Promise<Reply> {
    if (!Array.isArray(paths)) throw new ApiError(400, "paths is required");
    const boundary = `daytona-double-${randomBytes(8).toString("hex")}`;
    const parts: Buffer[] = [];
    for (const p of paths as string[]) {
      let name = "file";
      let type = "application/octet-stream";
      let data: Buffer;
      try {
        data = await this.files.download(w, p);
      } catch (e) {
        if (!(e instanceof ApiError)) throw e;
        name = "error";
        type = "application/json";
        data = Buffer.from(JSON.stringify({ message: e.message, statusCode: e.status, code: e.code }));
      }
      parts.push(
        Buffer.from(
          `--${boundary}\r\nContent-Disposition: form-data; name="${name}"; filename="${p}"\r\n` +
            `Content-Type: ${type}\r\nContent-Length: ${data.length}\r\n\r\n`,
        ),
        data,
        Buffer.from("\r\n"),
      );
    }
    parts.push(Buffer.from(`--${boundary}--\r\n`));
    return {
      status: 200,
      bytes: Buffer.concat(parts),
      contentType: `multipart/form-data; boundary=${boundary}`,
    };
  }
}

interface Part {
  name: string;
  data: Buffer;
}

/** The parts of a multipart/form-data body (small bodies, held whole). */
export function parseMultipart(raw: Buffer, contentType: string): Part[] {
  const m = /boundary=(?:"([^"]+)"|([^;]+))/i.exec(contentType);
  const boundary = m?.[1] ?? m?.[2];
  if (!boundary) throw new ApiError(400, "multipart body without a boundary");
  const delimiter = Buffer.from(`--${boundary}`);
  const parts: Part[] = [];
  let at = raw.indexOf(delimiter);
  while (at >= 0) {
    const start = at + delimiter.length;
    if (raw.subarray(start, start + 2).toString() === "--") break;
    const next = raw.indexOf(delimiter, start);
    if (next < 0) break;
    const part = raw.subarray(start + 2, next - 2);
    const headerEnd = part.indexOf("\r\n\r\n");
    const headers = part.subarray(0, headerEnd).toString();
    const name = /name="([^"]*)"/i.exec(headers)?.[1] ?? "";
    parts.push({ name, data: part.subarray(headerEnd + 4) });
    at = next;
  }
  return parts;
}

/** The SDK's upload form: `files[i].path` then `files[i].file`, for each i. */
function uploads(parts: Part[]): Array<{ path: string; data: Buffer }> {
  const byIndex = new Map<string, { path?: string; data?: Buffer }>();
  for (const p of parts) {
    const m = /^files\[(\d+)\]\.(path|file)$/.exec(p.name);
    if (!m) continue;
    const entry = byIndex.get(m[1] ?? "") ?? {};
    if (m[2] === "path") entry.path = p.data.toString();
    else entry.data = p.data;
    byIndex.set(m[1] ?? "", entry);
  }
  return [...byIndex.values()].map((e) => {
    if (e.path === undefined || e.data === undefined)
      throw new ApiError(400, "an upload lacks its path or file");
    return { path: e.path, data: e.data };
  });
}
