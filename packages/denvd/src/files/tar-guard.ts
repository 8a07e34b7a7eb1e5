import { randomUUID } from "node:crypto";
import { createWriteStream } from "node:fs";
import { rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, posix } from "node:path";
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { setImmediate as yieldToLoop } from "node:timers/promises";
import { DenvError, Protection, type SpecialFileReason, SpecialFileReasons } from "@denv/spec";
import { extract, type Header, type Pack, pack } from "tar-stream";
import { ArchiveTree, components } from "./archive-tree.js";

/**
 * Protection 3 for tar archives that cross into or out of an environment: uploads through the
 * files API, and submission paths collected from the agent's environment for the verifier
 * (which the agent could have planted). The archive is read once, every entry is checked, and
 * a clean copy is written to a temp file; the caller hands that copy on only if the whole
 * archive passed, so a refusal writes nothing anywhere.
 *
 * The clean copy carries only what extraction needs (name, type, mode, owner, mtime, size,
 * link target): pax extended headers are dropped, and with them extended attributes such as
 * `security.capability`, which would grant privileges the way a setuid bit does.
 */

export interface GuardLimits {
  /** Components in an entry's path (after `strip`). */
  maxDepth: number;
  /** Bytes of regular-file content, summed over the archive. */
  maxBytes: number;
  /** Entries in the archive, and also paths in the tree it makes (parents it implies count). */
  maxEntries: number;
}

export const DEFAULT_LIMITS: Readonly<GuardLimits> = Object.freeze({
  maxDepth: 64,
  maxBytes: 1024 ** 3,
  maxEntries: 100_000,
});

export interface GuardOptions {
  limits?: Partial<GuardLimits>;
  /** Rewrites the owner of every entry (e.g. the agent user's uid/gid); undefined keeps the headers. */
  owner?: { uid: number; gid: number };
  /**
   * Leading path components to remove before the checks, like `tar --strip-components`;
   * entries left with no path are dropped. `strip: 1` re-roots a directory fetched with
   * Docker's getArchive (which names the directory's basename first). Hard-link targets are
   * stripped too; symlink targets are not, they are relative to where the link lands.
   */
  strip?: number;
  /** Where the clean archive is written; the system temp directory by default. */
  tmpDir?: string;
  /**
   * Named before an entry's path in a refusal, so that the message names the path where the
   * user knows it (a submission fetched from /workspace names 'app/x' in the archive and
   * '/workspace/app/x' in the refusal).
   */
  displayRoot?: string;
}

export interface GuardedArchive extends AsyncDisposable {
  /** A temp file holding the validated (possibly rewritten) tar. */
  path: string;
  /** Entries written to it. */
  entries: number;
  /** Bytes of regular-file content in it. */
  bytes: number;
  /** Removes the temp file (also what `await using` does). */
  cleanup(): Promise<void>;
}

/** Linux refuses longer paths and link targets (PATH_MAX counts the NUL) and longer names. */
const PATH_MAX = 4096;
const NAME_MAX = 255;
const SETID_BITS = 0o6000;
const ENTRIES_PER_TURN = 1000;

type EntryKind = "file" | "directory" | "symlink" | "link";

/**
 * Reads the whole input tar, validates every entry, and writes a clean tar to a temp file.
 *
 * Entries are refused in archive order, each with the first failing check, in this order:
 * entry count, path (absolute, `..`, longer than Linux allows), type, setuid/setgid bit,
 * depth, where it lands (through or onto a symlink the archive planted: "a symlink that
 * escapes", since an extractor that follows links would write where the link points), link
 * target, content bytes. A symlink that escapes only because of a later entry is found when
 * the archive ends. A leading `./` is ignored; an entry naming the root itself (`./`) is
 * dropped, since the destination directory belongs to the caller.
 *
 * @throws DenvError `special_file` with Protection.specialFile naming the first refused
 *   entry as the archive spells it; the temp file is removed first.
 * @throws DenvError `invalid_request` when the input is not a readable tar.
 * @throws whatever reading the input or writing the temp file throws, as is.
 */
export async function guardTar(
  input: NodeJS.ReadableStream | Buffer,
  options: GuardOptions = {},
): Promise<GuardedArchive> {
  const limits: GuardLimits = { ...DEFAULT_LIMITS, ...options.limits };
  const strip = options.strip ?? 0;
  if (!Number.isInteger(strip) || strip < 0) {
    throw new RangeError(`strip must be a whole number, not ${strip}`);
  }

  const path = join(options.tmpDir ?? tmpdir(), `denv-guard-${randomUUID()}.tar`);
  const source = Buffer.isBuffer(input) ? Readable.from([input]) : input;
  const parser = extract();
  const output = pack();
  const file = createWriteStream(path, { flags: "wx", mode: 0o600 });
  // Whichever stream failed first decides what the caller is told. The parser also reports the
  // source's errors (the pipeline passes them on); only its own mean the input is not a tar.
  const failed: { source?: unknown; parser?: unknown; file?: unknown } = {};
  source.once("error", (err: unknown) => {
    failed.source ??= err;
  });
  parser.on("error", (err: unknown) => {
    if (err !== failed.source) failed.parser ??= err;
  });
  file.once("error", (err: unknown) => {
    failed.file ??= err;
  });
  // Both pipelines settle into values so that a failure on one side never surfaces as an
  // unhandled rejection while the loop below is still busy with the other.
  const reading = settle(pipeline(source, parser));
  const writing = settle(pipeline(output, file));

  const check = new EntryCheck(limits, strip, options.owner);
  try {
    for await (const entry of parser) {
      // No await before the entry is read: a parse error meanwhile would destroy it unread and
      // leave the copy waiting forever.
      const header = check.admit(entry.header);
      if (header?.type === "file") {
        await pipeline(entry, output.entry(keepModeZero(header)));
      } else {
        await drain(entry);
        if (header !== undefined) await addEmpty(output, header);
      }
      // Buffered input parses without ever returning to the event loop; heartbeats must not wait.
      if (check.seen % ENTRIES_PER_TURN === 0) await yieldToLoop();
    }
    await check.finish();
    output.finalize();
    const failure = (await reading) ?? (await writing);
    if (failure !== undefined) throw failure;
  } catch (err) {
    parser.destroy();
    output.destroy();
    await Promise.all([reading, writing]);
    // A write stream destroyed while still opening creates the file afterwards: wait it out.
    if (!file.closed) await new Promise<void>((resolve) => file.once("close", () => resolve()));
    await rm(path, { force: true });
    if (err instanceof DenvError && err.code === "special_file" && options.displayRoot !== undefined) {
      const [name = "", reason] = err.details;
      throw new DenvError(
        "special_file",
        Protection.specialFile(posix.join(options.displayRoot, name), reason as SpecialFileReason),
        err.details,
      );
    }
    if (err instanceof DenvError) throw err;
    if (failed.parser !== undefined) throw notATar(failed.parser);
    throw failed.source ?? failed.file ?? err;
  }
  const cleanup = () => rm(path, { force: true });
  return { path, entries: check.entries, bytes: check.bytes, cleanup, [Symbol.asyncDispose]: cleanup };
}

class EntryCheck {
  private readonly tree: ArchiveTree;
  seen = 0;
  entries = 0;
  bytes = 0;

  constructor(
    private readonly limits: GuardLimits,
    private readonly strip: number,
    private readonly owner: { uid: number; gid: number } | undefined,
  ) {
    this.tree = new ArchiveTree(limits.maxEntries);
  }

  /** The header to write for an entry, undefined to drop it, or throws the refusal. */
  admit(header: Header): Header | undefined {
    const name = header.name;
    this.seen += 1;
    if (this.seen > this.limits.maxEntries) refuse(name, SpecialFileReasons.tooLarge);
    const full = splitEntryPath(name);
    if (typeof full === "string") refuse(name, full);
    const kind = entryKind(header.type);
    if (kind === undefined) refuse(name, refusedType(header.type));
    if ((header.mode & SETID_BITS) !== 0) refuse(name, SpecialFileReasons.setid);
    if (full.length === 0) {
      if (kind === "directory") return undefined;
      refuse(name, SpecialFileReasons.unsupported);
    }
    const path = full.slice(this.strip);
    if (path.length === 0) return undefined;
    if (path.length > this.limits.maxDepth) refuse(name, SpecialFileReasons.tooDeep);

    const written: Header = {
      name: kind === "directory" ? `${path.join("/")}/` : path.join("/"),
      type: kind,
      mode: header.mode,
      mtime: header.mtime,
      size: 0,
      uid: this.owner?.uid ?? header.uid,
      gid: this.owner?.gid ?? header.gid,
      // Extractors running as root look owners up by name first, which would undo the rewrite.
      uname: this.owner === undefined ? header.uname : "",
      gname: this.owner === undefined ? header.gname : "",
      linkname: "",
      devmajor: 0,
      devminor: 0,
    };
    let refused: SpecialFileReason | undefined;
    switch (kind) {
      case "directory":
        refused = this.tree.addDirectory(path);
        break;
      case "file":
        refused = this.tree.addFile(path);
        if (refused === undefined && this.bytes + header.size > this.limits.maxBytes) {
          refused = SpecialFileReasons.tooLarge;
        }
        this.bytes += header.size;
        written.size = header.size;
        break;
      case "symlink": {
        const target = header.linkname ?? "";
        refused = refusedTarget(target) ?? this.tree.addSymlink(path, target, name);
        written.linkname = target;
        break;
      }
      case "link": {
        const target = hardLinkTarget(header.linkname, this.strip);
        refused = target ? this.tree.addHardLink(path, target) : SpecialFileReasons.hardlinkEscapes;
        written.linkname = target?.join("/") ?? "";
        break;
      }
    }
    if (refused !== undefined) refuse(name, refused);
    this.entries += 1;
    return written;
  }

  /** Checks what only the whole archive shows. */
  async finish(): Promise<void> {
    const escaping = await this.tree.firstEscapingSymlink();
    if (escaping !== undefined) refuse(escaping, SpecialFileReasons.symlinkEscapes);
  }
}

function refuse(name: string, reason: SpecialFileReason): never {
  throw new DenvError("special_file", Protection.specialFile(name, reason), [name, reason]);
}

/** The components of an entry's path, or why the path is refused. */
function splitEntryPath(name: string): string[] | SpecialFileReason {
  if (name.startsWith("/")) return SpecialFileReasons.absolute;
  const parts = components(name);
  if (parts.includes("..")) return SpecialFileReasons.climbs;
  if (tooLong(name, parts)) return SpecialFileReasons.tooDeep;
  return parts;
}

/** Why a symlink's target is refused before it is resolved, if it is. */
function refusedTarget(linkname: string): SpecialFileReason | undefined {
  if (linkname === "") return SpecialFileReasons.unsupported;
  if (linkname.startsWith("/")) return SpecialFileReasons.symlinkEscapes;
  if (tooLong(linkname, components(linkname))) return SpecialFileReasons.tooDeep;
  return undefined;
}

/** A hard link's target is an archive path, stripped like the entry paths; undefined when it escapes. */
function hardLinkTarget(linkname: string | null | undefined, strip: number): string[] | undefined {
  if (!linkname) return undefined;
  const full = splitEntryPath(linkname);
  if (typeof full === "string") return undefined;
  const path = full.slice(strip);
  return path.length === 0 ? undefined : path;
}

function tooLong(path: string, parts: readonly string[]): boolean {
  return Buffer.byteLength(path) >= PATH_MAX || parts.some((part) => Buffer.byteLength(part) > NAME_MAX);
}

// tar-stream reports types it does not know as null, which its typings leave out.
function entryKind(type: Header["type"] | null): EntryKind | undefined {
  switch (type) {
    case "file":
    case "contiguous-file":
      return "file";
    case "directory":
    case "symlink":
    case "link":
      return type;
    default:
      return undefined;
  }
}

function refusedType(type: Header["type"] | null): SpecialFileReason {
  switch (type) {
    case "character-device":
    case "block-device":
      return SpecialFileReasons.device;
    case "fifo":
      return SpecialFileReasons.fifo;
    default:
      return SpecialFileReasons.unsupported;
  }
}

function addEmpty(output: Pack, header: Header): Promise<void> {
  return new Promise((resolve, reject) => {
    output.entry(keepModeZero(header), (err) => (err ? reject(err) : resolve()));
  });
}

/** Content of entries that carry none in the clean copy (a size on a directory or link). */
async function drain(entry: AsyncIterable<unknown>): Promise<void> {
  for await (const _chunk of entry) {
    // discarded
  }
}

function settle(work: Promise<unknown>): Promise<unknown> {
  return work.then(
    () => undefined,
    (err: unknown) => err ?? new Error("failed without a reason"),
  );
}

function notATar(err: unknown): DenvError {
  const cause = err instanceof Error ? err.message : String(err);
  return new DenvError("invalid_request", `the archive is not a readable tar: ${cause}`);
}

/**
 * tar-stream's pack replaces a mode of 0 with its default (0644/0755), which would make a file
 * meant to be unreadable readable. It writes only the permission bits (mode & 07777), so a mode
 * with just the file-type bit set is written as 0 and kept.
 */
function keepModeZero(header: Header): Header {
  if (header.mode !== 0) return header;
  return { ...header, mode: header.type === "directory" ? 0o040000 : 0o100000 };
}
