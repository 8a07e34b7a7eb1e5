import { createWriteStream } from "node:fs";
import { copyFile, link, lstat, mkdir, rm, symlink, utimes } from "node:fs/promises";
import path from "node:path";
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { DenvClientError } from "../errors.js";
import { BLOCK, decodeHeader, type EntryType, parsePax, type TarEntry, typeOf } from "./tar-header.js";

export interface ExtractOptions {
  /**
   * Renames entries (the archive path, `/`-separated, no trailing slash); return undefined to
   * leave an entry out. `denv cp ENV:/a/b ./c` maps `b/...` to `c/...`.
   */
  mapName?: (name: string) => string | undefined;
  /** Told about entries that are not written (devices, FIFOs). */
  onSkip?: (name: string, why: string) => void;
}

export interface ExtractResult {
  entries: number;
  bytes: number;
}

/**
 * The entries of a tar stream, in order, each with its content as a stream of chunks. Content
 * a consumer does not read is skipped when it asks for the next entry.
 */
export async function* tarEntries(
  source: AsyncIterable<Uint8Array>,
): AsyncGenerator<{ entry: TarEntry; content: AsyncIterable<Buffer> }> {
  const reader = new BlockReader(source);
  try {
    yield* readEntries(reader);
  } finally {
    // A consumer that stops early (a peek at the first header) releases the source.
    await reader.close();
  }
}

async function* readEntries(
  reader: BlockReader,
): AsyncGenerator<{ entry: TarEntry; content: AsyncIterable<Buffer> }> {
  let pax: Record<string, string> = {};
  let longName: string | undefined;
  let longLink: string | undefined;
  for (;;) {
    const block = await reader.read(BLOCK);
    if (block === undefined) return;
    const raw = decodeHeader(block);
    if (raw === null) return;
    const kind = typeOf(raw.typeflag);
    const size = pax.size !== undefined ? Number(pax.size) : raw.size;
    if (kind === "pax" || kind === "pax-global" || kind === "gnu-longname" || kind === "gnu-longlink") {
      const body = (await reader.read(size)) ?? Buffer.alloc(0);
      await reader.skip(pad(size));
      if (kind === "pax") pax = parsePax(body);
      else if (kind === "gnu-longname") longName = body.toString("utf8").replace(/\0+$/, "");
      else if (kind === "gnu-longlink") longLink = body.toString("utf8").replace(/\0+$/, "");
      continue;
    }
    const entry: TarEntry = {
      name: (pax.path ?? longName ?? raw.name).replace(/\/+$/, ""),
      type: kind as EntryType,
      mode: raw.mode,
      size,
      mtime: pax.mtime !== undefined ? Number(pax.mtime) : raw.mtime,
      linkname: pax.linkpath ?? longLink ?? raw.linkname,
    };
    pax = {};
    longName = undefined;
    longLink = undefined;
    // Links and folders carry no data whatever their size field says; other types may (GNU sparse files).
    let left = entry.type === "directory" || entry.type === "symlink" || entry.type === "link" ? 0 : size;
    const content = (async function* () {
      for await (const chunk of reader.chunks(left)) {
        left -= chunk.length;
        yield chunk;
      }
    })();
    yield { entry, content };
    await reader.skip(left + pad(size));
  }
}

/**
 * Extracts a tar stream into `dest`. What comes from an environment was possibly planted by
 * the agent, so nothing is written outside `dest`: absolute and climbing paths are refused,
 * nothing is written through a symlink the archive created, hard links must point inside,
 * setuid/setgid bits are dropped and owners are not restored.
 */
export async function extractTar(
  source: AsyncIterable<Uint8Array>,
  dest: string,
  options: ExtractOptions = {},
): Promise<ExtractResult> {
  const root = path.resolve(dest);
  await mkdir(root, { recursive: true });
  // Directories known to be real directories under root (not symlinks), checked once each.
  const safeDirs = new Set<string>([root]);
  const result: ExtractResult = { entries: 0, bytes: 0 };
  for await (const { entry, content } of tarEntries(source)) {
    if (await writeEntry(entry, content, root, safeDirs, options)) {
      result.entries++;
      result.bytes += entry.type === "file" ? entry.size : 0;
    }
  }
  return result;
}

/** Writes one entry; false when it was left out. */
async function writeEntry(
  entry: TarEntry,
  content: AsyncIterable<Buffer>,
  root: string,
  safeDirs: Set<string>,
  options: ExtractOptions,
): Promise<boolean> {
  const original = entry.name.replace(/^(\.\/)+/, "");
  if (original === "" || original === ".") {
    return false; // the archive's own top directory: dest is it
  }
  const mapped = options.mapName === undefined ? original : options.mapName(original);
  if (mapped === undefined) return false;
  const target = inside(root, mapped, entry.name);
  if (entry.type === "other") {
    options.onSkip?.(entry.name, "not a regular file, directory, symlink or hard link");
    return false;
  }
  await makeParents(root, path.dirname(target), safeDirs, entry.name);
  if (entry.type === "directory") {
    await makeParents(root, target, safeDirs, entry.name);
    return true;
  }
  await removeNonDirectory(target);
  if (entry.type === "symlink") {
    await symlink(entry.linkname, target);
  } else if (entry.type === "link") {
    const from = inside(
      root,
      options.mapName?.(entry.linkname.replace(/\/+$/, "")) ?? entry.linkname,
      entry.name,
    );
    const stat = await lstat(from).catch(() => undefined);
    if (stat === undefined || !stat.isFile())
      throw refused(entry.name, "is a hard link to no file of the archive");
    // A hard link the file system refuses (another device) becomes a copy.
    await link(from, target).catch(() => copyFile(from, target));
  } else {
    await pipeline(Readable.from(content), createWriteStream(target, { mode: entry.mode & 0o777 }));
    const when = new Date(entry.mtime * 1000);
    await utimes(target, when, when).catch(() => undefined);
  }
  return true;
}

/** The absolute path of an archive path under root; refuses absolute and climbing paths. */
function inside(root: string, name: string, shown: string): string {
  if (name.startsWith("/") || path.isAbsolute(name)) throw refused(shown, "is an absolute path");
  const target = path.resolve(root, ...name.split("/"));
  if (target !== root && !target.startsWith(`${root}${path.sep}`)) throw refused(shown, "climbs out (..)");
  return target;
}

/**
 * Creates `dir` and its parents under root, refusing to go through a symlink: an archive that
 * first plants `a -> /etc` and then writes `a/passwd` must not reach /etc.
 */
async function makeParents(root: string, dir: string, safeDirs: Set<string>, shown: string): Promise<void> {
  if (safeDirs.has(dir)) return;
  const parts = path.relative(root, dir).split(path.sep);
  let current = root;
  for (const part of parts) {
    current = path.join(current, part);
    if (safeDirs.has(current)) continue;
    const stat = await lstat(current).catch(() => undefined);
    if (stat === undefined) await mkdir(current);
    else if (stat.isSymbolicLink()) throw refused(shown, "goes through a symlink");
    else if (!stat.isDirectory())
      throw refused(shown, `needs '${path.relative(root, current)}' to be a directory`);
    safeDirs.add(current);
  }
}

async function removeNonDirectory(target: string): Promise<void> {
  const stat = await lstat(target).catch(() => undefined);
  if (stat !== undefined && !stat.isDirectory()) await rm(target, { force: true });
}

function refused(name: string, why: string): DenvClientError {
  return new DenvClientError(
    "special_file",
    `refused: tar entry '${name}' ${why}; nothing is written outside the destination`,
  );
}

const pad = (size: number) => (size % BLOCK === 0 ? 0 : BLOCK - (size % BLOCK));

/** Reads exact byte counts from a chunked stream. */
class BlockReader {
  readonly #source: AsyncIterator<Uint8Array>;
  #buffer: Buffer = Buffer.alloc(0);
  #done = false;

  constructor(source: AsyncIterable<Uint8Array>) {
    this.#source = source[Symbol.asyncIterator]();
  }

  async #fill(): Promise<boolean> {
    if (this.#done) return false;
    const next = await this.#source.next();
    if (next.done === true) {
      this.#done = true;
      return false;
    }
    this.#buffer =
      this.#buffer.length === 0 ? Buffer.from(next.value) : Buffer.concat([this.#buffer, next.value]);
    return true;
  }

  /** Exactly n bytes; undefined at the end of the stream; an error when it ends midway. */
  async read(n: number): Promise<Buffer | undefined> {
    while (this.#buffer.length < n) {
      if (!(await this.#fill())) {
        if (this.#buffer.length === 0) return undefined;
        throw truncated();
      }
    }
    const out = this.#buffer.subarray(0, n);
    this.#buffer = this.#buffer.subarray(n);
    return out;
  }

  /** The next n bytes as they arrive, without holding them all. */
  async *chunks(n: number): AsyncGenerator<Buffer> {
    let left = n;
    while (left > 0) {
      if (this.#buffer.length === 0 && !(await this.#fill())) throw truncated();
      const take = this.#buffer.subarray(0, left);
      this.#buffer = this.#buffer.subarray(take.length);
      left -= take.length;
      yield take;
    }
  }

  async close(): Promise<void> {
    if (!this.#done) await this.#source.return?.();
    this.#done = true;
  }

  async skip(n: number): Promise<void> {
    for await (const _ of this.chunks(n)) {
      // dropped
    }
  }
}

const truncated = () =>
  new DenvClientError("invalid_response", "the tar stream ended in the middle of an entry");
