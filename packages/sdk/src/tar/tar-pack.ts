import { createReadStream } from "node:fs";
import { lstat, readdir, readlink } from "node:fs/promises";
import path from "node:path";
import { Readable } from "node:stream";
import { BLOCK, encodeHeader, padding, type TarEntry } from "./tar-header.js";

export interface PackOptions {
  /**
   * The archive name of `source` itself (default its base name). `"."` puts a directory's
   * contents at the archive's top level, as a project upload wants.
   */
  name?: string;
  /** Return false to leave a path out (relative to `source`, `/`-separated); a left-out directory is not entered. */
  filter?: (relPath: string, isDirectory: boolean) => boolean;
  /** Told about what cannot go in a tar (sockets, FIFOs, devices). */
  onSkip?: (relPath: string, why: string) => void;
}

/**
 * Packs a file or a directory into a tar stream, read lazily: files are streamed as the
 * consumer reads, so a large project is never held in memory. Symlinks are stored as links.
 */
export function packTar(source: string, options: PackOptions = {}): Readable {
  return Readable.from(packBlocks(path.resolve(source), options), { objectMode: false });
}

async function* packBlocks(root: string, options: PackOptions): AsyncGenerator<Buffer> {
  const top = options.name ?? path.basename(root);
  const archiveName = (rel: string) => (top === "." || top === "" ? rel : rel === "" ? top : `${top}/${rel}`);
  const filter = options.filter ?? (() => true);

  async function* walk(rel: string): AsyncGenerator<Buffer> {
    const abs = rel === "" ? root : path.join(root, ...rel.split("/"));
    const stat = await lstat(abs);
    const name = archiveName(rel);
    const base: Omit<TarEntry, "type" | "size" | "linkname"> = {
      name,
      mode: stat.mode & 0o7777,
      mtime: Math.floor(stat.mtimeMs / 1000),
    };
    if (stat.isDirectory()) {
      if (name !== "") yield encodeHeader({ ...base, type: "directory", size: 0, linkname: "" });
      const children = (await readdir(abs)).sort();
      for (const child of children) {
        const childRel = rel === "" ? child : `${rel}/${child}`;
        const childStat = await lstat(path.join(abs, child));
        if (!filter(childRel, childStat.isDirectory())) continue;
        yield* walk(childRel);
      }
    } else if (stat.isSymbolicLink()) {
      yield encodeHeader({ ...base, type: "symlink", size: 0, linkname: await readlink(abs) });
    } else if (stat.isFile()) {
      yield encodeHeader({ ...base, type: "file", size: stat.size, linkname: "" });
      yield* fileBytes(abs, stat.size);
      yield padding(stat.size);
    } else {
      options.onSkip?.(rel === "" ? path.basename(root) : rel, "not a regular file, directory or symlink");
    }
  }

  yield* walk("");
  yield Buffer.alloc(2 * BLOCK);
}

/**
 * Exactly `size` bytes of a file: the header already promised that many, so a file that grows
 * while it is read is cut and one that shrinks is padded with zeros.
 */
async function* fileBytes(file: string, size: number): AsyncGenerator<Buffer> {
  let sent = 0;
  if (size > 0) {
    for await (const chunk of createReadStream(file, { start: 0, end: size - 1 })) {
      const buf = chunk as Buffer;
      const take = buf.subarray(0, size - sent);
      sent += take.length;
      yield take;
      if (sent >= size) break;
    }
  }
  if (sent < size) yield Buffer.alloc(size - sent);
}
