import { constants, type Stats } from "node:fs";
import {
  chmod,
  type FileHandle,
  lchown,
  lstat,
  lutimes,
  mkdir,
  open,
  readdir,
  readlink,
  rm,
  symlink,
} from "node:fs/promises";
import { join } from "node:path";
import { DenvError, MAX_TRANSFER_CHUNK, type TransferEntry } from "@denv/spec";

/**
 * Directory trees on the wire: the sender walks one (sorted names, parents before children,
 * never following a symlink), the receiver writes one. What the receiver writes comes from
 * another host and, inside it, from a hostile environment: every path is checked component by
 * component, a parent must be a directory this receiver made, nothing is ever opened through a
 * symlink (O_NOFOLLOW), and devices, fifos and sockets are never made.
 */

export type WalkEntry = TransferEntry & { abs: string };

/** The tree under `root` in walk order; special files are counted in `special`, not yielded. */
export async function* walkTree(root: string, special: { count: number }): AsyncGenerator<WalkEntry> {
  async function* walk(rel: string): AsyncGenerator<WalkEntry> {
    const names = (await readdir(join(root, rel))).sort();
    for (const name of names) {
      const path = rel ? `${rel}/${name}` : name;
      const abs = join(root, path);
      const st = await lstat(abs);
      const base = {
        path,
        mode: st.mode & 0o7777,
        uid: st.uid,
        gid: st.gid,
        mtime_ms: st.mtimeMs,
        offset: 0,
      };
      if (st.isDirectory()) {
        yield { ...base, type: "dir", size: 0, abs };
        yield* walk(path);
      } else if (st.isFile()) yield { ...base, type: "file", size: st.size, abs };
      else if (st.isSymbolicLink())
        yield { ...base, type: "symlink", size: 0, target: await readlink(abs), abs };
      else special.count++;
    }
  }
  yield* walk("");
}

/** A file's bytes from `offset`, in chunks, read without following a symlink. */
export async function* fileChunks(abs: string, offset: number, size: number): AsyncGenerator<Buffer> {
  const fh = await open(abs, constants.O_RDONLY | constants.O_NOFOLLOW);
  try {
    let at = offset;
    while (at < size) {
      const buf = Buffer.allocUnsafe(Math.min(MAX_TRANSFER_CHUNK, size - at));
      const { bytesRead } = await fh.read(buf, 0, buf.length, at);
      if (bytesRead === 0) throw new DenvError("conflict", `${abs} shrank while it was being sent`);
      at += bytesRead;
      yield buf.subarray(0, bytesRead);
    }
  } finally {
    await fh.close();
  }
}

const BAD_COMPONENT = /^(|\.|\.\.)$/;

/** Checks a relative path from the wire; returns its components. */
export function checkPath(path: string): string[] {
  const parts = path.split("/");
  if (
    path.startsWith("/") ||
    parts.some((p) => BAD_COMPONENT.test(p) || p.includes("\0") || p.length > 255)
  ) {
    throw new DenvError("invalid_request", `version transfer: refused entry path '${path}'`);
  }
  return parts;
}

/**
 * Writes a tree from entries into `root`. With `owners`, files keep their uid/gid (a volume);
 * without, everything belongs to root (an image archive, read by the engine). Directory times
 * are set at the end (writing into a directory changes its time).
 */
export class TreeWriter {
  private dirs = new Set<string>([""]);
  private dirTimes: Array<{ abs: string; mtime: number }> = [];
  private file: { fh: FileHandle; entry: TransferEntry; at: number } | undefined;
  /** The last entry written whole, and how far the current file got: the resume point. */
  lastComplete: string | undefined;
  bytes = 0;

  private constructor(
    readonly root: string,
    private readonly owners: boolean,
  ) {}

  /**
   * A writer over `root`. `resumed`: an earlier attempt wrote part of it; its directories
   * (all this receiver's own: the root is private to denvd) are taken as made here.
   */
  static async open(root: string, opts: { owners: boolean; resumed: boolean }): Promise<TreeWriter> {
    await mkdir(root, { recursive: true, mode: 0o700 });
    const w = new TreeWriter(root, opts.owners);
    if (opts.resumed) await w.learnDirs("");
    return w;
  }

  private async learnDirs(rel: string): Promise<void> {
    for (const d of await readdir(join(this.root, rel), { withFileTypes: true })) {
      if (!d.isDirectory()) continue;
      const path = rel ? `${rel}/${d.name}` : d.name;
      this.dirs.add(path);
      await this.learnDirs(path);
    }
  }

  /** How many bytes of `path` are already here (a resumed file), or 0. */
  async have(path: string): Promise<number> {
    const st = await lstat(join(this.root, path)).catch(() => undefined);
    return st?.isFile() ? st.size : 0;
  }

  async begin(entry: TransferEntry): Promise<void> {
    if (this.file)
      throw new DenvError("invalid_request", `version transfer: ${entry.path} began inside a file`);
    const parts = checkPath(entry.path);
    const parent = parts.slice(0, -1).join("/");
    if (!this.dirs.has(parent)) {
      throw new DenvError(
        "invalid_request",
        `version transfer: refused entry '${entry.path}': its parent is not a directory of this transfer`,
      );
    }
    const abs = join(this.root, entry.path);
    const existing = await lstat(abs).catch(() => undefined);
    if (entry.type === "dir") {
      if (existing && !existing.isDirectory()) await rm(abs, { force: true });
      if (!existing?.isDirectory()) await mkdir(abs, { mode: 0o700 });
      this.dirs.add(entry.path);
      await this.own(abs, entry, existing);
      this.dirTimes.push({ abs, mtime: entry.mtime_ms });
      this.lastComplete = entry.path;
      return;
    }
    // A leftover of an interrupted attempt (or a directory in the way) goes; never followed.
    if (existing && !(entry.type === "file" && entry.offset > 0 && existing.isFile())) {
      await rm(abs, { recursive: true, force: true });
      this.dirs.delete(entry.path);
    }
    if (entry.type === "symlink") {
      await symlink(entry.target ?? "", abs);
      await this.own(abs, entry, undefined);
      await lutimes(abs, entry.mtime_ms / 1000, entry.mtime_ms / 1000);
      this.lastComplete = entry.path;
      return;
    }
    if (entry.offset > 0 && (existing?.size ?? 0) < entry.offset) {
      throw new DenvError("invalid_request", `version transfer: ${entry.path} resumes past what is here`);
    }
    const flags =
      entry.offset > 0
        ? constants.O_WRONLY | constants.O_NOFOLLOW
        : constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW;
    const fh = await open(abs, flags, 0o600);
    await fh.truncate(entry.offset);
    this.file = { fh, entry, at: entry.offset };
    if (entry.size === entry.offset) await this.endFile();
  }

  async write(chunk: Buffer): Promise<void> {
    const f = this.file;
    if (!f) throw new DenvError("invalid_request", "version transfer: data outside a file entry");
    if (f.at + chunk.length > f.entry.size) {
      throw new DenvError("invalid_request", `version transfer: ${f.entry.path} is longer than announced`);
    }
    await f.fh.write(chunk, 0, chunk.length, f.at);
    f.at += chunk.length;
    this.bytes += chunk.length;
    if (f.at === f.entry.size) await this.endFile();
  }

  /** The file being written and its length so far (for the journal). */
  get current(): { path: string; offset: number } | undefined {
    return this.file ? { path: this.file.entry.path, offset: this.file.at } : undefined;
  }

  private async endFile(): Promise<void> {
    const f = this.file as NonNullable<typeof this.file>;
    this.file = undefined;
    if (this.owners) await f.fh.chown(f.entry.uid, f.entry.gid);
    await f.fh.chmod(f.entry.mode & 0o7777);
    await f.fh.utimes(f.entry.mtime_ms / 1000, f.entry.mtime_ms / 1000);
    await f.fh.close();
    this.lastComplete = f.entry.path;
  }

  private async own(abs: string, entry: TransferEntry, existing: Stats | undefined): Promise<void> {
    if (this.owners) {
      await lchown(abs, entry.uid, entry.gid);
      if (entry.type === "dir") await chmod(abs, entry.mode & 0o7777);
    } else if (entry.type === "dir" && !existing) await chmod(abs, 0o755);
  }

  /** The part is complete: no file may be left open, directory times are set (deepest first). */
  async finish(): Promise<void> {
    if (this.file) {
      const f = this.file;
      await f.fh.close();
      throw new DenvError("invalid_request", `version transfer: ${f.entry.path} ended short`);
    }
    for (const d of this.dirTimes.reverse()) await lutimes(d.abs, d.mtime / 1000, d.mtime / 1000);
  }

  /** Closes an open file (an attempt that broke off); what was written stays for a resume. */
  async close(): Promise<void> {
    await this.file?.fh.close();
    this.file = undefined;
  }
}
