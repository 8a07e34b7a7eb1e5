import { mkdir, mkdtemp, rm } from "node:fs/promises";
import { join } from "node:path";
import { PassThrough, Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { createGunzip } from "node:zlib";
import { DenvError } from "@denv/spec";
import { guardTar } from "../files/tar-guard.js";
import { run } from "../host/run.js";

/**
 * A deploy's project source: a tar (gzip or not) arriving on a data stream. It is checked whole
 * with the special-file guard (no device nodes, no links or paths that climb out) before the
 * host's `tar` extracts the clean copy, as root but without the archive's owners. The directory
 * lives under the state dir and is removed after the build: the source is not kept.
 */

export interface ProjectSource extends AsyncDisposable {
  dir: string;
  entries: number;
  bytes: number;
  compressed: boolean;
}

/** Reads until the first two bytes are known, then hands on a stream that gunzips if needed. */
async function gunzipIfNeeded(
  input: AsyncIterable<Buffer>,
): Promise<{ stream: Readable; compressed: boolean }> {
  const it = input[Symbol.asyncIterator]();
  const head: Buffer[] = [];
  let size = 0;
  let done = false;
  while (size < 2) {
    const next = await it.next();
    if (next.done) {
      done = true;
      break;
    }
    head.push(next.value);
    size += next.value.length;
  }
  const first = Buffer.concat(head);
  const compressed = first[0] === 0x1f && first[1] === 0x8b;
  const rest = Readable.from(
    (async function* () {
      if (first.length > 0) yield first;
      if (done) return;
      for (;;) {
        const next = await it.next();
        if (next.done) return;
        yield next.value;
      }
    })(),
  );
  if (!compressed) return { stream: rest, compressed };
  const gunzip = createGunzip();
  pipeline(rest, gunzip).catch((err: Error) => gunzip.destroy(err));
  return { stream: gunzip, compressed };
}

export async function receiveSource(input: Readable, tmpRoot: string): Promise<ProjectSource> {
  // Taken before the first await: a child's stdout nobody listens to yet is resumed, and its
  // data dropped, once the child exits (Node's flushStdio), so a fast `git archive` arrived empty.
  const taken = new PassThrough();
  pipeline(input, taken).catch(() => undefined); // a failure reaches the reader as taken's error
  await mkdir(tmpRoot, { recursive: true, mode: 0o700 });
  const work = await mkdtemp(join(tmpRoot, "deploy-"));
  const cleanup = () => rm(work, { recursive: true, force: true });
  try {
    const { stream, compressed } = await gunzipIfNeeded(taken);
    await using guarded = await guardTar(stream, { tmpDir: work });
    const dir = join(work, "project");
    await mkdir(dir, { mode: 0o700 });
    const r = await run("tar", ["-x", "-f", guarded.path, "-C", dir, "--no-same-owner"]);
    if (r.code !== 0)
      throw new DenvError("invalid_request", `cannot extract the project source: ${r.stderr.trim()}`);
    return {
      dir,
      entries: guarded.entries,
      bytes: guarded.bytes,
      compressed,
      [Symbol.asyncDispose]: cleanup,
    };
  } catch (err) {
    await cleanup();
    if (err instanceof DenvError) throw err;
    throw new DenvError(
      "invalid_request",
      `the project source is not a readable tar: ${(err as Error).message}`,
    );
  }
}
