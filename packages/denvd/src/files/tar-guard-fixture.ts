import { mkdtemp, readdir, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { buffer } from "node:stream/consumers";
import { DenvError, Protection, type SpecialFileReason } from "@denv/spec";
import { extract } from "tar-stream";
import { afterAll, beforeAll, expect } from "vitest";
import { type GuardOptions, guardTar } from "./tar-guard.js";
import { type PackEntry, packEntries } from "./tar-pack.js";

/** An entry of a guarded archive, as the tests read it back. */
export interface ReadEntry {
  name: string;
  type: string;
  mode: number;
  uid: number;
  gid: number;
  uname: string;
  gname: string;
  linkname: string | null;
  content: Buffer;
}

export async function readTar(path: string): Promise<ReadEntry[]> {
  const parser = extract();
  parser.end(await readFile(path));
  const entries: ReadEntry[] = [];
  for await (const entry of parser) {
    const { name, type, mode, uid, gid, uname, gname, linkname } = entry.header;
    entries.push({ name, type, mode, uid, gid, uname, gname, linkname, content: await buffer(entry) });
  }
  return entries;
}

/** The same entry with another typeflag, for types tar-stream will not write. */
export function withTypeflag(archive: Buffer, flag: string): Buffer {
  const out = Buffer.from(archive);
  out[156] = flag.charCodeAt(0);
  out.fill(" ", 148, 156);
  let sum = 0;
  for (const byte of out.subarray(0, 512)) sum += byte;
  out.write(`${sum.toString(8).padStart(6, "0")}\0 `, 148, "latin1");
  return out;
}

/**
 * The scratch folder of one test file, made before its tests and removed after them, and
 * guardTar's refusals checked against a fresh temp dir in it: a refusal leaves nothing there.
 */
export function tarGuardFixture() {
  let scratch = "";
  beforeAll(async () => {
    scratch = await mkdtemp(join(tmpdir(), "denv-tar-guard-test-"));
  });
  afterAll(async () => {
    await rm(scratch, { recursive: true, force: true });
  });

  async function freshDir(prefix: string): Promise<string> {
    return mkdtemp(join(scratch, `${prefix}-`));
  }

  /** Runs guardTar expecting a refusal; checks that nothing was left in the temp dir. */
  async function refusal(input: Buffer, options: GuardOptions = {}): Promise<DenvError> {
    const tmpDir = await freshDir("tmp");
    const err = await guardTar(input, { ...options, tmpDir }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(DenvError);
    expect(await readdir(tmpDir)).toEqual([]);
    return err as DenvError;
  }

  async function expectRefused(
    entries: PackEntry[],
    path: string,
    reason: SpecialFileReason,
    options: GuardOptions = {},
  ): Promise<void> {
    const err = await refusal(await packEntries(entries), options);
    expect(err.code).toBe("special_file");
    expect(err.status).toBe(422);
    expect(err.message).toBe(Protection.specialFile(path, reason));
  }

  return { scratch: () => scratch, freshDir, refusal, expectRefused };
}
