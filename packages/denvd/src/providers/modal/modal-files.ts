import { createReadStream } from "node:fs";
import type { Readable } from "node:stream";
import type { Sandbox } from "modal";
import { type GuardedArchive, guardTar } from "../../files/tar-guard.js";
import { checkAbsolute, filesError, MAX_PACKED, tarArgv, tooBigError, untarArgv } from "../sandbox-tar.js";
import { execInModal, type ModalUser } from "./modal-exec.js";

/**
 * The files verbs through `tar` in a Modal sandbox, run as the asked user by execInModal (Modal's
 * `sandbox.filesystem` takes no user: what it writes is root's). An upload is checked whole by
 * denvd's special-file check (protection 3) before anything is written, then streamed as the
 * stdin of `tar -x` run as the user; a download is `tar -c` run as the user, its output held to
 * the check's limit as it arrives (past it the command is cancelled and killed) and passed through
 * the same check (a device, a FIFO, a socket, a link out is refused). The `tar` is the image's: it
 * runs inside the sandbox, as that user, and what it packs is checked here.
 */

/** Extracts a tar archive into directory `dest` (created when missing), as `user`. */
export async function putModalFiles(
  sb: Sandbox,
  user: ModalUser,
  dest: string,
  archive: Readable | Buffer,
): Promise<{ entries: number; bytes: number }> {
  const dir = checkAbsolute(dest);
  await using guarded = await guardTar(archive);
  const r = await execInModal(sb, user, "/", { cmd: untarArgv(dir), stdin: createReadStream(guarded.path) });
  if (r.exitCode !== 0) throw filesError(dir, r.stdout.toString() + r.stderr.toString());
  return { entries: guarded.entries, bytes: guarded.bytes };
}

/** A tar archive of `path` (a file or a directory, under its own base name), checked. */
export async function getModalFiles(sb: Sandbox, user: ModalUser, path: string): Promise<Readable> {
  const guarded = await readModalArchive(sb, user, path);
  const stream = createReadStream(guarded.path);
  stream.on("close", () => void guarded.cleanup());
  return stream;
}

/** The archive of `path` packed as `user`, checked (protection 3) into a temporary file on this host. */
export async function readModalArchive(sb: Sandbox, user: ModalUser, path: string): Promise<GuardedArchive> {
  const abs = checkAbsolute(path);
  const { argv, parent } = tarArgv(abs);
  const chunks: Buffer[] = [];
  let size = 0;
  const tooBig = new AbortController();
  const r = await execInModal(sb, user, "/", {
    cmd: argv,
    onStdout: (b) => {
      size += b.length;
      if (size > MAX_PACKED) tooBig.abort();
      else chunks.push(b);
    },
    signal: tooBig.signal,
    // What the result keeps (tar's words on stderr); the archive is collected above.
    outputLimit: 64 * 1024,
  });
  if (r.cancelled) throw tooBigError(abs);
  if (r.exitCode !== 0) throw filesError(abs, r.stderr.toString());
  return guardTar(Buffer.concat(chunks), { displayRoot: parent });
}
