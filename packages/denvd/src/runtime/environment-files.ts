import { createReadStream, createWriteStream } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join, posix } from "node:path";
import type { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { DenvError } from "@denv/spec";
import tar from "tar-stream";
import type { DockerClient } from "../docker/docker-client.js";
import { guardTar } from "../files/tar-guard.js";
import type { EnvironmentRecord } from "../records.js";
import { principalFor } from "./principals.js";

/**
 * The files verbs. Uploads are checked whole (protection 3) before anything is written, then
 * extracted by `tar` running inside the container as the target user, so that ownership and
 * permission checks are the user's own, as if the agent had written them.
 */

export interface FilesTarget {
  service?: string | undefined;
  user?: string | undefined;
}

function checkAbsolute(path: string): string {
  if (!path.startsWith("/")) throw new DenvError("invalid_request", `path '${path}' must be absolute`);
  return posix.normalize(path);
}

/** Extracts a tar archive into directory `dest` (created when missing). */
export async function putFiles(
  docker: DockerClient,
  rec: EnvironmentRecord,
  dest: string,
  archive: Readable | Buffer,
  t: FilesTarget = {},
): Promise<{ entries: number; bytes: number }> {
  const dir = checkAbsolute(dest);
  const { containerId, user } = await principalFor(docker, rec, t);
  const guarded = await guardTar(archive);
  try {
    const res = await docker.containers
      .exec(containerId, {
        cmd: ["sh", "-c", 'mkdir -p -- "$1" && exec tar -x -f - -C "$1" --no-same-owner', "sh", dir],
        user,
        stdin: true,
      })
      .then(async (h) => {
        const err: Buffer[] = [];
        h.stderr.on("data", (b: Buffer) => err.push(b));
        h.stdout.resume();
        const done = new Promise<void>((r) => h.stdout.on("end", () => r()));
        await pipeline(createReadStream(guarded.path), h.stream as NodeJS.WritableStream, {
          end: true,
        }).catch(() => undefined);
        await done;
        return { code: await h.exitCode(), stderr: Buffer.concat(err).toString("utf8").trim() };
      });
    if (res.code !== 0) throw filesError(dir, res.stderr);
    return { entries: guarded.entries, bytes: guarded.bytes };
  } finally {
    await guarded.cleanup();
  }
}

/** A tar archive of `path` (a file or a directory, under its own base name), read as the user. */
export async function getFiles(
  docker: DockerClient,
  rec: EnvironmentRecord,
  path: string,
  t: FilesTarget = {},
): Promise<Readable> {
  const abs = checkAbsolute(path);
  const { containerId, user } = await principalFor(docker, rec, t);
  const tmp = await mkdtemp(join(tmpdir(), "denvd-get-"));
  const file = join(tmp, "out.tar");
  try {
    const h = await docker.containers.exec(containerId, {
      cmd: ["tar", "-c", "-f", "-", "-C", posix.dirname(abs), "--", posix.basename(abs)],
      user,
      stdin: false,
    });
    const err: Buffer[] = [];
    h.stderr.on("data", (b: Buffer) => err.push(b));
    await pipeline(h.stdout, createWriteStream(file));
    const code = await h.exitCode();
    if (code !== 0) throw filesError(abs, Buffer.concat(err).toString("utf8").trim());
  } catch (e) {
    await rm(tmp, { recursive: true, force: true });
    throw e;
  }
  const stream = createReadStream(file);
  stream.on("close", () => void rm(tmp, { recursive: true, force: true }));
  return stream;
}

function filesError(path: string, stderr: string): DenvError {
  if (/No such file|Cannot stat|Cannot open: No such/i.test(stderr)) {
    return new DenvError("not_found", `${path}: no such file or directory`);
  }
  if (/Permission denied/i.test(stderr)) return new DenvError("forbidden", `${path}: permission denied`);
  if (/Not a directory/i.test(stderr)) return new DenvError("invalid_request", `${path}: not a directory`);
  return new DenvError("docker", `${path}: ${stderr || "tar failed"}`);
}

/** Writes one file (parents created), as the target user. */
export async function writeFile(
  docker: DockerClient,
  rec: EnvironmentRecord,
  path: string,
  content: Buffer | string,
  t: FilesTarget & { mode?: number } = {},
): Promise<void> {
  const abs = checkAbsolute(path);
  const pack = tar.pack();
  const body = typeof content === "string" ? Buffer.from(content) : content;
  pack.entry({ name: posix.basename(abs), size: body.length, mode: t.mode ?? 0o644 }, body);
  pack.finalize();
  await putFiles(docker, rec, dirname(abs), pack as unknown as Readable, t);
}

/** Reads one regular file. */
export async function readFile(
  docker: DockerClient,
  rec: EnvironmentRecord,
  path: string,
  t: FilesTarget = {},
): Promise<Buffer> {
  const abs = checkAbsolute(path);
  const archive = await getFiles(docker, rec, abs, t);
  const extract = tar.extract();
  let found: Buffer | undefined;
  let kind = "";
  extract.on("entry", (header, stream, next) => {
    const chunks: Buffer[] = [];
    if (!kind) kind = header.type ?? "";
    stream.on("data", (b: unknown) => {
      if (header.type === "file" && found === undefined) chunks.push(b as Buffer);
    });
    stream.on("end", () => {
      if (header.type === "file" && found === undefined) found = Buffer.concat(chunks);
      next();
    });
    stream.resume();
  });
  await pipeline(archive, extract);
  if (kind === "directory") throw new DenvError("invalid_request", `${abs}: is a directory`);
  if (found === undefined) throw new DenvError("not_found", `${abs}: not a regular file`);
  return found;
}
