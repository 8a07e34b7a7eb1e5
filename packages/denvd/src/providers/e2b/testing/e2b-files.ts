import type { IncomingMessage, ServerResponse } from "node:http";
import { posix } from "node:path";
import { gunzipSync } from "node:zlib";
import { ConnectError } from "./e2b-connect.js";
import { type Engine, tarOneFile } from "./e2b-docker.js";

/** Exit codes of the helper scripts below, mapped to envd's answers. */
const MISSING = 3;
const IS_DIR = 4;
const NOT_DIR = 4;
const DENIED = 5;

/**
 * Exits for a path "$1" that the user cannot see: MISSING if its nearest existing ancestor is
 * one they may search (so it really is absent), DENIED if not (e.g. /root for "user").
 */
const ABSENT = `{ d=$(dirname "$1"); while [ ! -e "$d" ]; do d=$(dirname "$d"); done; [ -x "$d" ] && exit ${MISSING}; exit ${DENIED}; }`;

/** What `find -printf` prints per entry: type, size, mode, permissions, owner, group, mtime, link, path. */
const ENTRY_FORMAT = "%y\\t%s\\t%m\\t%M\\t%u\\t%g\\t%T@\\t%l\\t%p\\0";

const fileTypes: Record<string, string> = {
  f: "FILE_TYPE_FILE",
  d: "FILE_TYPE_DIRECTORY",
  l: "FILE_TYPE_SYMLINK",
};

/**
 * envd's file routes: GET /files and POST /files (multipart `file` parts, or one
 * application/octet-stream body) on HTTP, and filesystem.Filesystem's Stat and ListDir on Connect.
 * Every check of a path runs inside the sandbox as the calling user, so permissions are theirs;
 * the bytes of an upload go in as a tar archive whose entry carries that user's uid and gid.
 */
export class EnvdFiles {
  /** Every path read through GET /files, in order: what a test checks was never read. */
  readonly reads: string[] = [];

  constructor(private readonly engine: Engine) {}

  private static resolve(user: string, path: string): string {
    return posix.resolve(homeOf(user), path);
  }

  private script(containerId: string, user: string, script: string, ...args: string[]) {
    return this.engine.exec(containerId, { cmd: ["sh", "-c", script, "sh", ...args], user });
  }

  async read(res: ServerResponse, containerId: string, user: string, q: URLSearchParams): Promise<void> {
    const path = EnvdFiles.resolve(user, q.get("path") ?? "");
    this.reads.push(path);
    const r = await this.script(
      containerId,
      user,
      `[ -e "$1" ] || ${ABSENT}; [ -d "$1" ] && exit ${IS_DIR}; exec cat -- "$1"`,
      path,
    );
    if (r.exitCode === MISSING) return httpError(res, 404, `path '${path}' does not exist`);
    if (r.exitCode === IS_DIR) return httpError(res, 400, `path '${path}' is a directory`);
    if (r.exitCode !== 0) return httpError(res, 403, `user '${user}' cannot read '${path}'`);
    res.writeHead(200, { "content-type": "application/octet-stream", "content-length": r.stdout.length });
    res.end(r.stdout);
  }

  async write(
    req: IncomingMessage,
    res: ServerResponse,
    body: Buffer,
    containerId: string,
    user: string,
    q: URLSearchParams,
  ): Promise<void> {
    const uploads: Array<{ path: string; data: Buffer }> = [];
    const contentType = req.headers["content-type"] ?? "";
    if (contentType.startsWith("multipart/form-data")) {
      const form = await new Request("http://envd/files", {
        method: "POST",
        headers: { "content-type": contentType },
        body,
      }).formData();
      for (const part of form.getAll("file")) {
        if (typeof part === "string") continue;
        uploads.push({ path: q.get("path") ?? part.name, data: Buffer.from(await part.arrayBuffer()) });
      }
    } else {
      const data = req.headers["content-encoding"] === "gzip" ? gunzipSync(body) : body;
      uploads.push({ path: q.get("path") ?? "", data });
    }
    if (uploads.length === 0 || uploads.some((u) => u.path === ""))
      return httpError(res, 400, "a file and its path are required");
    const written: Array<{ name: string; type: "file"; path: string }> = [];
    for (const u of uploads) {
      const path = EnvdFiles.resolve(user, u.path);
      const dir = posix.dirname(path);
      const check = await this.script(
        containerId,
        user,
        `mkdir -p -- "$1" 2>/dev/null || exit ${DENIED}; [ -d "$2" ] && exit ${IS_DIR}; ` +
          `[ -w "$1" ] || exit ${DENIED}; [ ! -e "$2" ] || [ -w "$2" ] || exit ${DENIED}; id -u; id -g`,
        dir,
        path,
      );
      if (check.exitCode === IS_DIR) return httpError(res, 400, `path '${path}' is a directory`);
      if (check.exitCode !== 0) return httpError(res, 403, `user '${user}' cannot write '${path}'`);
      const [uid, gid] = check.stdout.toString().trim().split("\n").map(Number);
      await this.engine.putArchive(
        containerId,
        dir,
        await tarOneFile(posix.basename(path), u.data, uid ?? 0, gid ?? 0),
      );
      written.push({ name: posix.basename(path), type: "file", path });
    }
    res.writeHead(200, { "content-type": "application/json" });
    res.end(JSON.stringify(written));
  }

  /** filesystem.Filesystem/Stat: the entry, or not_found (which `files.exists` reads as false). */
  async stat(containerId: string, user: string, msg: Record<string, unknown>): Promise<object> {
    const path = EnvdFiles.resolve(user, String(msg.path ?? ""));
    const r = await this.script(
      containerId,
      user,
      `[ -e "$1" ] || [ -L "$1" ] || ${ABSENT}; exec find "$1" -maxdepth 0 -printf '${ENTRY_FORMAT}'`,
      path,
    );
    const [entry] = this.entries(r, path);
    if (!entry) throw new ConnectError("internal", `stat printed nothing for '${path}'`);
    return entry;
  }

  /** filesystem.Filesystem/ListDir: the entries under a directory down to `depth` (default 1). */
  async listDir(containerId: string, user: string, msg: Record<string, unknown>): Promise<object[]> {
    const path = EnvdFiles.resolve(user, String(msg.path ?? ""));
    const depth = Math.max(1, Number(msg.depth ?? 1));
    return this.entries(
      await this.script(
        containerId,
        user,
        `[ -e "$1" ] || ${ABSENT}; [ -d "$1" ] || exit ${NOT_DIR}; ` +
          `exec find "$1" -mindepth 1 -maxdepth "$2" -printf '${ENTRY_FORMAT}'`,
        path,
        String(depth),
      ),
      path,
    );
  }

  /** EntryInfo messages in proto3 JSON (int64 size as a string, enum by name, RFC 3339 time). */
  private entries(r: { exitCode: number; stdout: Buffer; stderr: Buffer }, path: string): object[] {
    if (r.exitCode === MISSING) throw new ConnectError("not_found", `path '${path}' does not exist`);
    if (r.exitCode === NOT_DIR)
      throw new ConnectError("invalid_argument", `path '${path}' is not a directory`);
    if (r.exitCode !== 0)
      throw new ConnectError("permission_denied", `cannot see '${path}' ${r.stderr.toString().trim()}`);
    return r.stdout
      .toString()
      .split("\0")
      .filter((line) => line !== "")
      .map((line) => {
        const [type = "", size, mode, permissions, owner, group, mtime, link, p = ""] = line.split("\t");
        return {
          name: posix.basename(p),
          type: fileTypes[type] ?? "FILE_TYPE_UNSPECIFIED",
          path: p,
          size: String(size),
          mode: Number.parseInt(mode ?? "0", 8),
          permissions,
          owner,
          group,
          modifiedTime: new Date(Number(mtime) * 1000).toISOString(),
          ...(type === "l" ? { symlinkTarget: link } : {}),
        };
      });
  }
}

/** A user's home, where envd starts processes and resolves relative paths. */
export function homeOf(user: string): string {
  return user === "root" ? "/root" : `/home/${user}`;
}

function httpError(res: ServerResponse, status: number, message: string): void {
  res.writeHead(status, { "content-type": "application/json" });
  res.end(JSON.stringify({ code: status, message }));
}
