import { createHash } from "node:crypto";
import { lstat, mkdir, readFile, stat, writeFile } from "node:fs/promises";
import { join } from "node:path";
import type { Readable } from "node:stream";
import {
  DenvError,
  type TransferEntry,
  type TransferManifest,
  type TransferPart,
  TransferRecordType,
  type TransferResume,
} from "@denv/spec";
import { extract } from "tar-stream";
import type { ImageRecord, VersionRecord } from "../records.js";
import { type HostContext, requireVersion } from "../runtime/host-context.js";
import { fileChunks, walkTree } from "./tree.js";
import type { RecordWriter } from "./wire.js";

/**
 * The holder's side of a version transfer: the manifest, then every part the receiver does not
 * have yet, from its resume point. Images go as the entries of their `docker save` archive,
 * minus the layers whose chain the receiver's engine already has (the engine's load skips a
 * layer it has, so the archive need not carry it); volumes as their snapshot's tree.
 */

/** Chain ids of a layer stack, bottom first (the engine's layer identity). */
export function chainIds(diffIds: readonly string[]): string[] {
  const out: string[] = [];
  for (const d of diffIds) {
    const prev = out.at(-1);
    out.push(prev === undefined ? d : `sha256:${createHash("sha256").update(`${prev} ${d}`).digest("hex")}`);
  }
  return out;
}

/** The parts of a version, in the order they are sent. */
export function versionParts(v: VersionRecord): TransferPart[] {
  const parts: TransferPart[] = Object.keys(v.images)
    .sort()
    .map((svc) => ({ name: `image:${svc}`, kind: "image" as const }));
  if (v.verifierImage && !Object.values(v.images).some((i) => i.imageId === v.verifierImage?.imageId)) {
    parts.push({ name: "image:verifier", kind: "image" });
  }
  if (v.testsTar) parts.push({ name: "file:tests", kind: "file" });
  for (const name of Object.keys(v.volumes).sort()) parts.push({ name: `volume:${name}`, kind: "volume" });
  return parts;
}

async function transferImage(
  ctx: HostContext,
  img: ImageRecord,
): Promise<TransferManifest["record"]["images"][string]> {
  const info = await ctx.docker.images.info(img.imageId);
  if (!info)
    throw new DenvError("not_found", `image ${img.image} of the version is missing on ${ctx.hostId}`);
  return {
    image_id: info.id,
    chain_ids: chainIds(info.diffIds),
    layers: info.diffIds.length,
    ...(img.squashed ? { squashed: true } : {}),
  };
}

export async function manifestOf(ctx: HostContext, v: VersionRecord): Promise<TransferManifest> {
  const images: TransferManifest["record"]["images"] = {};
  for (const [svc, img] of Object.entries(v.images)) images[svc] = await transferImage(ctx, img);
  return {
    version: v.id,
    record: {
      project: v.project,
      number: v.number,
      source_environment: v.sourceEnvironment,
      ...(v.parentVersion ? { parent_version: v.parentVersion } : {}),
      plan: v.plan,
      images,
      ...(v.verifierImage ? { verifier_image: await transferImage(ctx, v.verifierImage) } : {}),
      volumes: Object.fromEntries(Object.entries(v.volumes).map(([k, x]) => [k, { bytes: x.bytes }])),
      tests: v.testsTar !== undefined,
      sizes: { layer_bytes: v.sizes.layerBytes, volume_bytes: v.sizes.volumeBytes },
      created_at: v.createdAt,
    },
    parts: versionParts(v),
  };
}

/**
 * Which chain each `<dir>/layer.tar` of an image's archive is. The archive names layer
 * directories by ids of the engine's own making and lists them in manifest.json, its last
 * entry: one pass over the archive finds out, once per image (kept under the state dir).
 */
async function layerChains(ctx: HostContext, imageId: string): Promise<Map<string, string>> {
  const dir = join(ctx.stateDir, "transfer-cache");
  const file = join(dir, `${imageId.replace(/[^a-z0-9]/gi, "_")}.json`);
  const cached = await readFile(file, "utf8").catch(() => undefined);
  if (cached) return new Map(Object.entries(JSON.parse(cached) as Record<string, string>));
  const info = await ctx.docker.images.info(imageId);
  if (!info) throw new DenvError("not_found", `image ${imageId} is missing on ${ctx.hostId}`);
  let manifest: Array<{ Layers: string[] }> | undefined;
  await eachTarEntry(await ctx.docker.images.save(imageId), async (header, body) => {
    if (header.name === "manifest.json") manifest = JSON.parse((await collect(body)).toString("utf8"));
    else body.resume();
  });
  const layers = manifest?.[0]?.Layers;
  if (!layers || layers.length !== info.diffIds.length) {
    throw new DenvError(
      "docker",
      `the engine's archive of ${imageId} does not list its ${info.diffIds.length} layers`,
    );
  }
  const chains = chainIds(info.diffIds);
  const map = Object.fromEntries(layers.map((l, i) => [l, chains[i] as string]));
  await mkdir(dir, { recursive: true, mode: 0o700 });
  await writeFile(file, JSON.stringify(map));
  return new Map(Object.entries(map));
}

interface TarHeader {
  name: string;
  type: string | null | undefined;
  size?: number | undefined;
  mode?: number | undefined;
  mtime?: Date | undefined;
  linkname?: string | null | undefined;
}

/** Calls `fn` for each entry of a tar stream, one at a time (its body must be read or resumed). */
async function eachTarEntry(
  tar: Readable,
  fn: (header: TarHeader, body: Readable) => Promise<void>,
): Promise<void> {
  const ex = extract();
  const done = new Promise<void>((resolve, reject) => {
    ex.on("entry", (header, body, next) => {
      let ended = false;
      body.on("end", () => {
        ended = true;
      });
      fn(header, body as unknown as Readable).then(
        () => (ended ? next() : body.on("end", next).resume()),
        (err: unknown) => ex.destroy(err as Error),
      );
    });
    ex.on("finish", resolve);
    ex.on("close", resolve);
    ex.on("error", reject);
    tar.on("error", (err) => ex.destroy(err));
  });
  tar.pipe(ex);
  await done;
}

async function collect(body: Readable): Promise<Buffer> {
  const out: Buffer[] = [];
  for await (const c of body) out.push(c as Buffer);
  return Buffer.concat(out);
}

/** Skips entries up to and including the resume point's `after`, and the bytes a resumed file has. */
class ResumeCursor {
  private skipping: boolean;
  constructor(private readonly at: TransferResume["current"] | undefined) {
    this.skipping = at?.after !== undefined;
  }
  /** undefined: skip this entry; else the offset its data starts at. */
  offsetOf(path: string): number | undefined {
    if (this.skipping) {
      if (path === this.at?.after) this.skipping = false;
      return undefined;
    }
    if (this.at?.file && path === this.at.file.path) return this.at.file.offset;
    return 0;
  }
  check(part: string): void {
    if (this.skipping) {
      throw new DenvError(
        "conflict",
        `version transfer: resume point ${this.at?.after ?? ""} is not in ${part}`,
      );
    }
  }
}

/** Streams `versionId` from `resume` into `out`. */
export async function sendVersion(
  ctx: HostContext,
  versionId: string,
  resume: TransferResume,
  out: RecordWriter,
  signal: AbortSignal,
): Promise<{ parts: string[] }> {
  const v = await requireVersion(ctx, versionId);
  const manifest = await manifestOf(ctx, v);
  await out.json(TransferRecordType.manifest, manifest);
  const have = new Set(resume.chain_ids);
  const sent: string[] = [];
  for (const part of manifest.parts) {
    if (resume.done.includes(part.name)) continue;
    if (signal.aborted) throw new DenvError("conflict", "version transfer: cancelled");
    const cursor = new ResumeCursor(resume.current?.part === part.name ? resume.current : undefined);
    const vol = part.kind === "volume" ? v.volumes[part.name.slice("volume:".length)] : undefined;
    if (part.kind === "volume" && !vol)
      throw new DenvError("not_found", `version ${v.id} has no ${part.name}`);
    const rootStat = vol ? await lstat(ctx.store.snapPath(vol.snapshot)) : undefined;
    await out.json(TransferRecordType.part, {
      name: part.name,
      ...(rootStat
        ? {
            root: {
              mode: rootStat.mode & 0o7777,
              uid: rootStat.uid,
              gid: rootStat.gid,
              mtime_ms: rootStat.mtimeMs,
            },
          }
        : {}),
    });
    let entries = 0;
    const special = { count: 0 };
    const emit = async (entry: TransferEntry, chunks: () => AsyncIterable<Buffer>) => {
      await out.json(TransferRecordType.entry, entry);
      for await (const c of chunks()) await out.data(c);
      entries++;
    };
    if (part.kind === "image") {
      const img =
        part.name === "image:verifier" ? v.verifierImage : v.images[part.name.slice("image:".length)];
      if (!img) throw new DenvError("not_found", `version ${v.id} has no ${part.name}`);
      const chains = await layerChains(ctx, img.imageId);
      await eachTarEntry(await ctx.docker.images.save(img.imageId), async (h, body) => {
        const name = h.name.replace(/\/+$/, "");
        const chain = chains.get(name);
        const type =
          h.type === "directory"
            ? "dir"
            : h.type === "symlink"
              ? "symlink"
              : h.type === "file"
                ? "file"
                : undefined;
        const offset = type && !(chain && have.has(chain)) ? cursor.offsetOf(name) : undefined;
        if (type === undefined || offset === undefined || !name) {
          body.resume();
          return;
        }
        const size = type === "file" ? (h.size ?? 0) : 0;
        const entry: TransferEntry = {
          path: name,
          type,
          mode: (h.mode ?? 0o644) & 0o7777,
          uid: 0,
          gid: 0,
          mtime_ms: h.mtime?.getTime() ?? 0,
          size,
          offset,
          ...(type === "symlink" ? { target: h.linkname ?? "" } : {}),
        };
        await emit(entry, () => skipBytes(body, offset));
      });
    } else if (part.kind === "file") {
      const path = v.testsTar as string;
      const size = (await stat(path)).size;
      const offset = cursor.offsetOf("tests.tar");
      if (offset !== undefined) {
        const entry: TransferEntry = {
          path: "tests.tar",
          type: "file",
          mode: 0o600,
          uid: 0,
          gid: 0,
          mtime_ms: 0,
          size,
          offset,
        };
        await emit(entry, () => fileChunks(path, offset, size));
      }
    } else if (vol) {
      for await (const e of walkTree(ctx.store.snapPath(vol.snapshot), special)) {
        const offset = cursor.offsetOf(e.path);
        if (offset === undefined) continue;
        const { abs, ...entry } = e;
        await emit({ ...entry, offset }, () =>
          e.type === "file" ? fileChunks(abs, offset, e.size) : noChunks(),
        );
      }
    }
    cursor.check(part.name);
    await out.json(TransferRecordType.partEnd, { name: part.name, entries, skipped_special: special.count });
    sent.push(part.name);
  }
  await out.json(TransferRecordType.end, {});
  return { parts: sent };
}

async function* noChunks(): AsyncGenerator<Buffer> {}

/** A tar entry's body from `offset` (a resumed file: the engine's archive is byte-identical each time). */
async function* skipBytes(body: Readable, offset: number): AsyncGenerator<Buffer> {
  let skip = offset;
  for await (const raw of body) {
    let chunk = raw as Buffer;
    if (skip > 0) {
      const n = Math.min(skip, chunk.length);
      skip -= n;
      chunk = chunk.subarray(n);
    }
    if (chunk.length > 0) yield chunk;
  }
}
