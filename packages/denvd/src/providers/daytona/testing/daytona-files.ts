import { ApiError } from "./daytona-api-error.js";
import type { DaytonaDocker } from "./daytona-docker.js";
import type { Sandbox } from "./daytona-sandboxes.js";

/** What a toolbox file call needs: the sandbox's running container, user and workdir. */
export interface Where {
  container: string;
  sb: Sandbox;
}

/**
 * The toolbox's file calls (`sandbox.fs`), each a `docker exec` as the sandbox user in its
 * workdir (relative paths resolve there), so permissions and owners are the user's own.
 */
export class ToolboxFiles {
  constructor(private readonly docker: DaytonaDocker) {}

  /** Runs a small sh script as the sandbox user; a failure maps to Daytona's file errors. */
  private async sh(w: Where, script: string, args: string[], stdin?: Buffer): Promise<Buffer> {
    const r = await this.docker.exec(w.container, {
      cmd: ["sh", "-c", script, "sh", ...args],
      user: w.sb.user,
      cwd: w.sb.workdir,
      ...(stdin !== undefined ? { stdin } : {}),
    });
    if (r.exitCode === 0) return r.stdout;
    const msg = r.stderr.toString().trim() || `exit code ${r.exitCode}`;
    if (/No such file|not found|cannot stat/i.test(msg)) throw new ApiError(404, msg, "FILE_NOT_FOUND");
    if (/Permission denied|Operation not permitted/i.test(msg))
      throw new ApiError(403, msg, "FILE_ACCESS_DENIED");
    throw new ApiError(400, msg);
  }

  async upload(w: Where, path: string, data: Buffer): Promise<void> {
    await this.sh(w, 'mkdir -p -- "$(dirname -- "$1")" && cat > "$1"', [path], data);
  }

  async download(w: Where, path: string): Promise<Buffer> {
    return this.sh(w, 'test -f "$1" || { echo "$1: No such file" >&2; exit 1; }; cat -- "$1"', [path]);
  }

  /** GET /files: the entries of a directory as FileInfo. */
  async list(w: Where, path: string): Promise<object[]> {
    const out = await this.sh(
      w,
      'cd -- "$1" && find . -mindepth 1 -maxdepth 1 -exec stat -c "%s|%a|%A|%U|%G|%Y|%F|%n" {} +',
      [path],
    );
    return lines(out).map((l) => fileInfo(l, path));
  }

  /** GET /files/info. */
  async info(w: Where, path: string): Promise<object> {
    const out = await this.sh(w, 'stat -c "%s|%a|%A|%U|%G|%Y|%F|%n" -- "$1"', [path]);
    return fileInfo(lines(out)[0] ?? "", undefined);
  }

  async createFolder(w: Where, path: string, mode: string): Promise<void> {
    await this.sh(w, 'mkdir -p -m "$2" -- "$1"', [path, mode || "0755"]);
  }

  /** DELETE /files: a directory only with `recursive`, as Daytona's daemon refuses otherwise. */
  async remove(w: Where, path: string, recursive: boolean): Promise<void> {
    await this.sh(
      w,
      'test -e "$1" || test -L "$1" || { echo "$1: No such file" >&2; exit 1; }; ' +
        'if [ -d "$1" ] && [ "$2" != true ]; then echo "$1 is a directory; delete it with recursive" >&2; exit 1; fi; ' +
        'rm -rf -- "$1"',
      [path, String(recursive)],
    );
  }

  /** POST /files/permissions: mode with chmod, owner/group with chown (root only, as anywhere). */
  async setPermissions(w: Where, path: string, q: URLSearchParams): Promise<void> {
    const owner = q.get("owner") ?? "";
    const group = q.get("group") ?? "";
    await this.sh(
      w,
      'if [ -n "$2" ]; then chmod "$2" -- "$1" || exit 1; fi; ' +
        'if [ -n "$3" ]; then chown "$3" -- "$1" || exit 1; fi; ' +
        'if [ -n "$4" ]; then chgrp "$4" -- "$1" || exit 1; fi',
      [path, q.get("mode") ?? "", owner, group],
    );
  }
}

function lines(b: Buffer): string[] {
  return b
    .toString()
    .split("\n")
    .filter((l) => l !== "");
}

/** One `stat -c "%s|%a|%A|%U|%G|%Y|%F|%n"` line as the toolbox's FileInfo. */
function fileInfo(line: string, dir: string | undefined): object {
  const parts = line.split("|");
  const [size = "0", perm = "0", mode = "", owner = "", group = "", mtime = "0", type = ""] = parts;
  const full = parts.slice(7).join("|");
  const name = full.replace(/^\.\//, "").split("/").pop() ?? full;
  const modified = new Date(Number(mtime) * 1000).toISOString();
  return {
    name,
    ...(dir !== undefined ? { path: `${dir.replace(/\/$/, "")}/${name}` } : { path: full }),
    isDir: type === "directory",
    size: Number(size),
    mode,
    permissions: perm.padStart(4, "0"),
    owner,
    group,
    modTime: modified,
    modifiedAt: modified,
  };
}
