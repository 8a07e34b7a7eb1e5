import { createReadStream } from "node:fs";
import { readFile } from "node:fs/promises";
import type { Readable } from "node:stream";
import { type GuardedArchive, guardTar } from "../../files/tar-guard.js";
import { Capped } from "../e2b/sandbox-exec.js";
import { checkAbsolute, filesError, MAX_PACKED, tarArgv, tooBigError, untarArgv } from "../sandbox-tar.js";
import type { PrimeApi } from "./prime-api.js";

/**
 * The files verbs through `tar` in a Prime sandbox, run as the asked user by the command session
 * (Prime's file routes take no user: what they write is root's). An upload is checked whole by
 * denvd's special-file check (protection 3) before anything is written, then fed as the stdin of
 * `tar -x` run as the user; a download is `tar -c` run as the user, its output held to the
 * check's limit as it arrives and passed through the same check (a device, a FIFO, a socket, a
 * link out is refused). The `tar` is the image's: it runs inside the sandbox, as that user, and
 * what it packs is checked here.
 */

/** Extracts a tar archive into directory `dest` (created when missing), as `user`. */
export async function putPrimeFiles(
  api: PrimeApi,
  sandboxId: string,
  user: string,
  dest: string,
  archive: Readable | Buffer,
): Promise<{ entries: number; bytes: number }> {
  const dir = checkAbsolute(dest);
  await using guarded = await guardTar(archive);
  const r = await api.runCommand(sandboxId, untarArgv(dir), {
    user,
    cwd: "/",
    stdin: await readFile(guarded.path),
  });
  if (r.exitCode !== 0) throw filesError(dir, r.stdout.toString() + r.stderr.toString());
  return { entries: guarded.entries, bytes: guarded.bytes };
}

/** A tar archive of `path` (a file or a directory, under its own base name), checked. */
export async function getPrimeFiles(
  api: PrimeApi,
  sandboxId: string,
  user: string,
  path: string,
): Promise<Readable> {
  const guarded = await readPrimeArchive(api, sandboxId, user, path);
  const stream = createReadStream(guarded.path);
  stream.on("close", () => void guarded.cleanup());
  return stream;
}

/** The archive of `path` packed as `user`, checked (protection 3) into a temporary file on this host. */
export async function readPrimeArchive(
  api: PrimeApi,
  sandboxId: string,
  user: string,
  path: string,
): Promise<GuardedArchive> {
  const abs = checkAbsolute(path);
  const { argv, parent } = tarArgv(abs);
  const chunks: Buffer[] = [];
  const errors = new Capped(64 * 1024, true);
  let size = 0;
  const tooBig = new AbortController();
  const r = await api
    .runCommand(sandboxId, argv, {
      user,
      cwd: "/",
      collect: false,
      onStdout: (b) => {
        size += b.length;
        if (size > MAX_PACKED) tooBig.abort();
        else chunks.push(b);
      },
      onStderr: (b) => errors.push(b),
      signal: tooBig.signal,
    })
    .catch((e: unknown) => {
      if (!tooBig.signal.aborted) throw e;
      return undefined;
    });
  if (r === undefined) throw tooBigError(abs);
  if (r.exitCode !== 0) throw filesError(abs, errors.value().toString());
  return guardTar(Buffer.concat(chunks), { displayRoot: parent });
}
