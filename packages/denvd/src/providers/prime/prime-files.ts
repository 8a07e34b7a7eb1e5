import { createReadStream } from "node:fs";
import { readFile } from "node:fs/promises";
import { posix } from "node:path";
import type { Readable } from "node:stream";
import { DenvError } from "@denv/spec";
import { DEFAULT_LIMITS, type GuardedArchive, guardTar } from "../../files/tar-guard.js";
import { Capped } from "../e2b/sandbox-exec.js";
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

/** Bytes a packed download may hold beyond the check's content limit (tar's headers and padding). */
const TAR_OVERHEAD = 64 * 1024 ** 2;

function checkAbsolute(path: string): string {
  if (!path.startsWith("/")) throw new DenvError("invalid_request", `path '${path}' must be absolute`);
  return posix.normalize(path);
}

/** A failed `tar` or `mkdir` in the sandbox as denv's error, naming the path (tar's own words last). */
function filesError(path: string, output: string): DenvError {
  const lines = output.trim().split("\n");
  if (lines.some((l) => /No such file or directory/.test(l)))
    return new DenvError("not_found", `${path}: no such file or directory`);
  if (lines.some((l) => /Permission denied|Operation not permitted/.test(l)))
    return new DenvError("forbidden", `${path}: permission denied`);
  return new DenvError("docker", `${path}: ${lines[0] ?? ""}`);
}

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
  const r = await api.runCommand(
    sandboxId,
    ["/bin/sh", "-c", 'mkdir -p -- "$1" && tar -xf - -C "$1" --no-same-owner 2>&1', "sh", dir],
    { user, cwd: "/", stdin: await readFile(guarded.path) },
  );
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
  const parent = posix.dirname(abs);
  const base = abs === "/" ? "." : posix.basename(abs);
  const chunks: Buffer[] = [];
  const errors = new Capped(64 * 1024, true);
  let size = 0;
  const tooBig = new AbortController();
  const r = await api
    .runCommand(sandboxId, ["tar", "-cf", "-", "-C", parent, "--", base], {
      user,
      cwd: "/",
      collect: false,
      onStdout: (b) => {
        size += b.length;
        if (size > DEFAULT_LIMITS.maxBytes + TAR_OVERHEAD) tooBig.abort();
        else chunks.push(b);
      },
      onStderr: (b) => errors.push(b),
      signal: tooBig.signal,
    })
    .catch((e: unknown) => {
      if (!tooBig.signal.aborted) throw e;
      return undefined;
    });
  if (r === undefined) {
    throw new DenvError(
      "invalid_request",
      `${abs}: more than a download may hold (${DEFAULT_LIMITS.maxBytes} bytes of content)`,
    );
  }
  if (r.exitCode !== 0) throw filesError(abs, errors.value().toString());
  return guardTar(Buffer.concat(chunks), { displayRoot: parent });
}
