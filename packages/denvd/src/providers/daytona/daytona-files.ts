import { randomBytes } from "node:crypto";
import { createReadStream } from "node:fs";
import { readFile } from "node:fs/promises";
import { posix } from "node:path";
import type { Readable } from "node:stream";
import { DenvError } from "@denv/spec";
import { DEFAULT_LIMITS, type GuardedArchive, guardTar } from "../../files/tar-guard.js";
import { shellQuote } from "../e2b/sandbox-exec.js";
import { runTool } from "./daytona-exec.js";
import type { DaytonaSandbox } from "./daytona-sdk.js";

/**
 * The files verbs through Daytona's files API and `tar` in the sandbox, as the sandbox's one OS
 * user. An upload is checked whole by denvd's special-file check (protection 3) before anything
 * is written, uploaded as that checked archive and unpacked by `tar` in the sandbox; a download is
 * packed by `tar` in the sandbox, its size held to the check's limit before it is read, and passed
 * through the same check (a device, a FIFO, a socket, a link out is refused). The `tar` is the
 * image's: it runs inside the sandbox, as the agent's user, and what it packs is checked here.
 */

/** Bytes a packed download may hold beyond the check's content limit (tar's headers and padding). */
const TAR_OVERHEAD = 64 * 1024 ** 2;

function checkAbsolute(path: string): string {
  if (!path.startsWith("/")) throw new DenvError("invalid_request", `path '${path}' must be absolute`);
  return posix.normalize(path);
}

/** A failed `tar` or `mkdir` in the sandbox as denv's error, naming the path. */
function filesError(path: string, output: string): DenvError {
  const line = output.trim().split("\n").at(-1) ?? "";
  if (/No such file or directory/.test(line))
    return new DenvError("not_found", `${path}: no such file or directory`);
  if (/Permission denied|Operation not permitted/.test(line))
    return new DenvError("forbidden", `${path}: permission denied`);
  return new DenvError("docker", `${path}: ${line}`);
}

/** Extracts a tar archive into directory `dest` (created when missing). */
export async function putDaytonaFiles(
  sbx: DaytonaSandbox,
  dest: string,
  archive: Readable | Buffer,
): Promise<{ entries: number; bytes: number }> {
  const dir = checkAbsolute(dest);
  await using guarded = await guardTar(archive);
  const tmp = `/tmp/.denv-put-${randomBytes(8).toString("hex")}.tar`;
  await sbx.fs.uploadFile(await readFile(guarded.path), tmp);
  const r = await runTool(
    sbx,
    `mkdir -p -- ${shellQuote(dir)} && tar -xf ${shellQuote(tmp)} -C ${shellQuote(dir)} --no-same-owner 2>&1; s=$?; rm -f -- ${shellQuote(tmp)}; exit $s`,
  );
  if (r.exitCode !== 0) throw filesError(dir, r.output);
  return { entries: guarded.entries, bytes: guarded.bytes };
}

/** A tar archive of `path` (a file or a directory, under its own base name), checked. */
export async function getDaytonaFiles(sbx: DaytonaSandbox, path: string): Promise<Readable> {
  const guarded = await readDaytonaArchive(sbx, path);
  const stream = createReadStream(guarded.path);
  stream.on("close", () => void guarded.cleanup());
  return stream;
}

/** The archive of `path`, checked (protection 3) into a temporary file on this host. */
export async function readDaytonaArchive(sbx: DaytonaSandbox, path: string): Promise<GuardedArchive> {
  const abs = checkAbsolute(path);
  const tmp = `/tmp/.denv-get-${randomBytes(8).toString("hex")}.tar`;
  const parent = posix.dirname(abs);
  const base = abs === "/" ? "." : posix.basename(abs);
  try {
    const r = await runTool(
      sbx,
      `tar -cf ${shellQuote(tmp)} -C ${shellQuote(parent)} -- ${shellQuote(base)} 2>&1`,
    );
    if (r.exitCode !== 0) throw filesError(abs, r.output);
    const size = (await sbx.fs.getFileDetails(tmp)).size;
    if (size > DEFAULT_LIMITS.maxBytes + TAR_OVERHEAD) {
      throw new DenvError(
        "invalid_request",
        `${abs}: ${size} bytes packed, more than a download may hold (${DEFAULT_LIMITS.maxBytes} bytes of content)`,
      );
    }
    const packed = await sbx.fs.downloadFile(tmp);
    return await guardTar(packed, { displayRoot: parent });
  } finally {
    await runTool(sbx, `rm -f -- ${shellQuote(tmp)}`).catch(() => undefined);
  }
}
