import { createReadStream } from "node:fs";
import { posix } from "node:path";
import { Readable } from "node:stream";
import { buffer } from "node:stream/consumers";
import { pipeline } from "node:stream/promises";
import { DenvError, Protection, type SpecialFileReason, SpecialFileReasons } from "@denv/spec";
import tar from "tar-stream";
import { DEFAULT_LIMITS, type GuardedArchive, type GuardLimits, guardTar } from "../../files/tar-guard.js";
import { type E2bSandbox, loadE2b } from "./e2b-sdk.js";
import { shellQuote } from "./sandbox-exec.js";
import { type SandboxUser, SYSTEM_PATH } from "./sandbox-user.js";

/**
 * The files verbs through E2B's files API. An upload is checked whole by denvd's special-file
 * check (protection 3) before anything is written; then its regular files are written through
 * `sandbox.files.write` as the target user, and what that API cannot make (directories of their
 * own, links the check let through, modes) is made by one command as the same user. A download
 * is read through the files API as the target user, packed, and passed through the same check:
 * an entry E2B cannot name the type of (a device, a FIFO, a socket) is refused.
 */

/** Files written per files.write call (one multipart request each), and the bytes one holds at most. */
const WRITE_BATCH = 64;
const WRITE_BATCH_BYTES = 64 * 1024 ** 2;

function checkAbsolute(path: string): string {
  if (!path.startsWith("/")) throw new DenvError("invalid_request", `path '${path}' must be absolute`);
  return posix.normalize(path);
}

interface Entry {
  name: string;
  type: "file" | "directory" | "symlink" | "link";
  mode: number;
  linkname?: string;
}

/**
 * Reads a checked archive entry by entry: regular files go to `write` in batches (at most
 * WRITE_BATCH files or WRITE_BATCH_BYTES bytes held at once), the rest is returned without data.
 */
async function streamEntries(
  path: string,
  write: (files: Array<{ name: string; data: Buffer }>) => Promise<void>,
): Promise<Entry[]> {
  const entries: Entry[] = [];
  let batch: Array<{ name: string; data: Buffer }> = [];
  let held = 0;
  const flush = async () => {
    if (batch.length === 0) return;
    const out = batch;
    batch = [];
    held = 0;
    await write(out);
  };
  const extract = tar.extract();
  extract.on("entry", (header, stream, next) => {
    void buffer(stream)
      .then(async (data) => {
        const name = header.name.replace(/^\.\//, "").replace(/\/$/, "");
        const type = header.type as Entry["type"];
        entries.push({
          name,
          type,
          mode: header.mode ?? 0o644,
          ...(header.linkname ? { linkname: header.linkname } : {}),
        });
        if (type !== "file") return;
        batch.push({ name, data });
        held += data.length;
        if (batch.length >= WRITE_BATCH || held >= WRITE_BATCH_BYTES) await flush();
      })
      .then(() => next(), next);
  });
  await pipeline(createReadStream(path), extract);
  await flush();
  return entries;
}

/** Extracts a tar archive into directory `dest` (created when missing), as `user`. */
export async function putSandboxFiles(
  sbx: E2bSandbox,
  user: SandboxUser,
  dest: string,
  archive: Readable | Buffer,
): Promise<{ entries: number; bytes: number }> {
  const dir = checkAbsolute(dest);
  const guarded = await guardTar(archive);
  try {
    const at = (name: string) => posix.join(dir, name);
    const entries = await streamEntries(guarded.path, async (files) => {
      await sbx.files.write(
        files.map((f) => ({ path: at(f.name), data: new Uint8Array(f.data).buffer })),
        { user: user.name },
      );
    });
    const script = [`mkdir -p -- ${shellQuote(dir)}`];
    for (const e of entries) {
      const p = shellQuote(at(e.name));
      if (e.type === "directory") script.push(`mkdir -p -- ${p}`);
      else if (e.type === "symlink") script.push(`ln -sfn -- ${shellQuote(e.linkname ?? "")} ${p}`);
      else if (e.type === "link") script.push(`ln -f -- ${shellQuote(at(e.linkname ?? ""))} ${p}`);
    }
    // Modes last, deepest first, so that a read-only directory is made so after what it holds.
    for (const e of [...entries].reverse()) {
      if (e.type === "file" || e.type === "directory") {
        script.push(`chmod ${(e.mode & 0o7777).toString(8)} -- ${shellQuote(at(e.name))}`);
      }
    }
    const { CommandExitError } = await loadE2b();
    try {
      await sbx.commands.run(`set -e; export PATH=${SYSTEM_PATH}; ${script.join("; ")}`, {
        user: user.name,
        cwd: "/",
        timeoutMs: 0,
      });
    } catch (e) {
      if (e instanceof CommandExitError) throw filesError(dir, e.stderr);
      throw e;
    }
    return { entries: guarded.entries, bytes: guarded.bytes };
  } finally {
    await guarded.cleanup();
  }
}

/** A tar archive of `path` (a file or a directory, under its own base name), read as `user`. */
export async function getSandboxFiles(sbx: E2bSandbox, user: SandboxUser, path: string): Promise<Readable> {
  const guarded = await readSandboxArchive(sbx, user, path);
  const stream = createReadStream(guarded.path);
  stream.on("close", () => void guarded.cleanup());
  return stream;
}

/**
 * The archive of `path`, read as `user` and checked (protection 3) into a temporary file. The
 * listing's sizes and count are held to the check's limits before a byte is read, and the archive
 * streams into the check as it is read: no more than one file of it is in memory at a time.
 *
 * @throws DenvError `not_found` when there is no such path; `special_file` for a special file
 *   or a tree over the limits (nothing is left behind).
 */
export async function readSandboxArchive(
  sbx: E2bSandbox,
  user: SandboxUser,
  path: string,
  limits: GuardLimits = DEFAULT_LIMITS,
): Promise<GuardedArchive> {
  const abs = checkAbsolute(path);
  const { FileNotFoundError, FileType } = await loadE2b();
  const opts = { user: user.name };
  let top: Awaited<ReturnType<E2bSandbox["files"]["getInfo"]>>;
  try {
    top = await sbx.files.getInfo(abs, opts);
  } catch (e) {
    if (e instanceof FileNotFoundError) throw new DenvError("not_found", `${abs}: no such file or directory`);
    throw e;
  }
  const below =
    top.type === FileType.DIR
      ? (await sbx.files.list(abs, { ...opts, depth: limits.maxDepth })).sort((a, b) =>
          a.path.localeCompare(b.path),
        )
      : [];
  const refuse = (at: string, reason: SpecialFileReason) =>
    new DenvError("special_file", Protection.specialFile(at, reason), [at, reason]);
  if (below.length + 1 > limits.maxEntries) throw refuse(abs, SpecialFileReasons.tooLarge);
  let total = 0;
  for (const e of [top, ...below]) {
    if (e.type === FileType.FILE) total += e.size;
    if (total > limits.maxBytes) throw refuse(e.path, SpecialFileReasons.tooLarge);
  }

  const pack = tar.pack();
  const checked = guardTar(Readable.from(pack), { limits, displayRoot: posix.dirname(abs) });
  let failed = false;
  checked.catch(() => {
    failed = true;
  });
  const add = async (name: string, e: typeof top) => {
    const mode = e.mode & 0o7777;
    if (e.type === FileType.DIR) pack.entry({ name, type: "directory", mode });
    else if (e.type === FileType.SYMLINK)
      pack.entry({ name, type: "symlink", linkname: e.symlinkTarget ?? "" });
    else if (e.type === FileType.FILE) {
      const data = Buffer.from(await sbx.files.read(e.path, { ...opts, format: "bytes" }));
      pack.entry({ name, type: "file", mode, size: data.length }, data);
    } else {
      // E2B names files, directories and symlinks; anything else is a special file.
      throw refuse(e.path, SpecialFileReasons.unsupported);
    }
  };
  const base = posix.basename(abs) || ".";
  try {
    await add(base, top);
    for (const e of below) {
      if (failed) break; // the check refused an entry: what it says is thrown below
      await add(posix.join(base, posix.relative(abs, e.path)), e);
    }
    pack.finalize();
  } catch (e) {
    pack.destroy();
    await checked.then(
      (g) => g.cleanup(),
      () => undefined,
    );
    throw e;
  }
  return checked;
}

function filesError(path: string, stderr: string): DenvError {
  if (/Permission denied/i.test(stderr)) return new DenvError("forbidden", `${path}: permission denied`);
  if (/Not a directory/i.test(stderr)) return new DenvError("invalid_request", `${path}: not a directory`);
  return new DenvError("docker", `${path}: ${stderr.trim() || "extraction in the sandbox failed"}`);
}
