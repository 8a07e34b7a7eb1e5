import {
  chmodSync,
  closeSync,
  constants,
  fchmodSync,
  fchownSync,
  ftruncateSync,
  futimesSync,
  lchownSync,
  lstatSync,
  lutimesSync,
  mkdirSync,
  openSync,
  readdirSync,
  readlinkSync,
  rmSync,
  type Stats,
  symlinkSync,
  writeSync,
} from "node:fs";
import { lstat, mkdir, readdir } from "node:fs/promises";
import { join } from "node:path";
import { DenvError, type TransferEntry } from "@denv/spec";

/**
 * Directory trees on the wire: the sender walks one (sorted names, parents before children,
 * never following a symlink), the receiver writes one. What the receiver writes comes from
 * another host and, inside it, from a hostile environment: every path is checked component by
 * component, a parent must be a directory this receiver made, nothing is ever opened through a
 * symlink (O_NOFOLLOW), and devices, fifos and sockets are never made.
 */

export type WalkEntry = TransferEntry & { abs: string };

/**
 * The tree under `root` in walk order; special files are counted in `special`, not yielded.
 * Synchronous calls: a snapshot's metadata is a few microseconds a call, where the promise API
 * costs a round trip through the thread pool per file (the walk yields per entry all the same).
 */
export async function* walkTree(root: string, special: { count: number }): AsyncGenerator<WalkEntry> {
  function* walk(rel: string): Generator<WalkEntry> {
    const names = readdirSync(join(root, rel)).sort();
    for (const name of names) {
      const path = rel ? `${rel}/${name}` : name;
      const abs = join(root, path);
      const st = lstatSync(abs);
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
        yield { ...base, type: "symlink", size: 0, target: readlinkSync(abs), abs };
      else special.count++;
    }
  }
  yield* walk("");
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
  private file: { fd: number; entry: TransferEntry; at: number } | undefined;
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

  /**
   * Starts an entry: a directory or a symlink is made at once, a file is opened for the bytes
   * that follow. Synchronous calls, as the sender's: a tree of small files is a handful of
   * syscalls per file, each a few microseconds, where the promise API costs a thread-pool round
   * trip apiece. A fresh entry is made with O_EXCL (mkdir, symlink: EEXIST) first; only what an
   * interrupted attempt left in the way is looked at and removed, never followed.
   */
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
    if (entry.type === "dir") {
      let existing: Stats | undefined;
      if (!tryCreate(() => mkdirSync(abs, { mode: 0o700 }))) {
        existing = lstatSync(abs);
        if (!existing.isDirectory()) {
          this.clear(abs, entry.path);
          mkdirSync(abs, { mode: 0o700 });
          existing = undefined;
        }
      }
      this.dirs.add(entry.path);
      if (this.owners) {
        lchownSync(abs, entry.uid, entry.gid);
        chmodSync(abs, entry.mode & 0o7777);
      } else if (!existing) chmodSync(abs, 0o755);
      this.dirTimes.push({ abs, mtime: entry.mtime_ms });
      this.lastComplete = entry.path;
      return;
    }
    if (entry.type === "symlink") {
      const target = entry.target ?? "";
      if (!tryCreate(() => symlinkSync(target, abs))) {
        this.clear(abs, entry.path);
        symlinkSync(target, abs);
      }
      if (this.owners) lchownSync(abs, entry.uid, entry.gid);
      lutimesSync(abs, entry.mtime_ms / 1000, entry.mtime_ms / 1000);
      this.lastComplete = entry.path;
      return;
    }
    let fd: number;
    if (entry.offset > 0) {
      // A resumed file: the part an earlier attempt wrote is here, a regular file.
      const existing = lstatSync(abs, { throwIfNoEntry: false });
      if (!existing?.isFile() || existing.size < entry.offset) {
        throw new DenvError("invalid_request", `version transfer: ${entry.path} resumes past what is here`);
      }
      fd = openSync(abs, constants.O_WRONLY | constants.O_NOFOLLOW);
      ftruncateSync(fd, entry.offset);
    } else {
      const flags = constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW;
      let opened = -1;
      if (!tryCreate(() => (opened = openSync(abs, flags, 0o600)))) {
        this.clear(abs, entry.path);
        opened = openSync(abs, flags, 0o600);
      }
      fd = opened;
    }
    this.file = { fd, entry, at: entry.offset };
    if (entry.size === entry.offset) await this.endFile();
  }

  async write(chunk: Buffer): Promise<void> {
    const f = this.file;
    if (!f) throw new DenvError("invalid_request", "version transfer: data outside a file entry");
    if (f.at + chunk.length > f.entry.size) {
      throw new DenvError("invalid_request", `version transfer: ${f.entry.path} is longer than announced`);
    }
    for (let done = 0; done < chunk.length; ) {
      done += writeSync(f.fd, chunk, done, chunk.length - done, f.at + done);
    }
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
    try {
      if (this.owners) fchownSync(f.fd, f.entry.uid, f.entry.gid);
      // After the chown, which clears setuid and setgid bits.
      fchmodSync(f.fd, f.entry.mode & 0o7777);
      futimesSync(f.fd, f.entry.mtime_ms / 1000, f.entry.mtime_ms / 1000);
    } finally {
      closeSync(f.fd);
    }
    this.lastComplete = f.entry.path;
  }

  /** What an interrupted attempt left at `abs` goes (a directory with what is in it). */
  private clear(abs: string, path: string): void {
    rmSync(abs, { recursive: true, force: true });
    for (const d of this.dirs) if (d === path || d.startsWith(`${path}/`)) this.dirs.delete(d);
  }

  /** The part is complete: no file may be left open, directory times are set (deepest first). */
  async finish(): Promise<void> {
    if (this.file) {
      const f = this.file;
      this.file = undefined;
      closeSync(f.fd);
      throw new DenvError("invalid_request", `version transfer: ${f.entry.path} ended short`);
    }
    for (const d of this.dirTimes.reverse()) lutimesSync(d.abs, d.mtime / 1000, d.mtime / 1000);
  }

  /** Closes an open file (an attempt that broke off); what was written stays for a resume. */
  async close(): Promise<void> {
    const f = this.file;
    this.file = undefined;
    if (f) closeSync(f.fd);
  }
}

/** Runs a create call; false when the name exists already (EEXIST), any other error is thrown. */
function tryCreate(create: () => unknown): boolean {
  try {
    create();
    return true;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "EEXIST") return false;
    throw err;
  }
}
