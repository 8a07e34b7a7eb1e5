import { createHash } from "node:crypto";
import { createWriteStream } from "node:fs";
import { lstat, mkdir, mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import { join } from "node:path";
import type { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
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
import { walkTree } from "./tree.js";
import type { RecordWriter } from "./wire.js";

/**
 * The holder's side of a version transfer: the manifest, then every part the receiver does not
 * have yet, from its resume point. Images go as the entries of their `docker save` archive,
 * minus the layers whose chain the receiver's engine already has (the engine's load skips a
 * layer it has, so the archive need not carry it); volumes as their snapshot's tree.
 *
 * Which chain a `<dir>/layer.tar` is, the archive says only in manifest.json, its last entry.
 * So an image's layers go last, after its other entries, each in archive order: the sender reads
 * the engine's archive once, keeps the layers it may have to send in a spool file under its
 * state dir's tmp/ (removed at every start) until manifest.json says which they are, then sends
 * those the receiver lacks. What it learnt is kept per image, so a later transfer of the image
 * spools only the layers it sends. The order is the same on every attempt, as a resume needs.
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

/**
 * The parts of a version, in the order they are sent: volumes first, so that the engine makes
 * the images' archives while their bytes go (the receiver takes parts in any order).
 */
export function versionParts(v: VersionRecord): TransferPart[] {
  const parts: TransferPart[] = Object.keys(v.volumes)
    .sort()
    .map((name) => ({ name: `volume:${name}`, kind: "volume" as const }));
  if (v.testsTar) parts.push({ name: "file:tests", kind: "file" });
  for (const svc of Object.keys(v.images).sort()) parts.push({ name: `image:${svc}`, kind: "image" });
  if (v.verifierImage && !Object.values(v.images).some((i) => i.imageId === v.verifierImage?.imageId)) {
    parts.push({ name: "image:verifier", kind: "image" });
  }
  return parts;
}

/** An image's archive as read from the engine: its entries in archive order, the bytes spooled. */
interface SpooledImage {
  /** Every entry but the layers, with its bytes (the small files of the archive) in memory. */
  entries: Array<{ entry: TransferEntry; bytes?: Buffer }>;
  /** `<dir>/layer.tar` entries the receiver may lack, each in a spool file. */
  layers: Array<{ entry: TransferEntry; file: string }>;
  /** Which chain each layer is. */
  chains: Map<string, string>;
}

/** Files of an archive other than its layers (configs, manifest.json) are small; more is refused. */
const MAX_ARCHIVE_FILE = 16 * 1024 * 1024;

/**
 * Reads an image's `docker save` archive once, to the end: layers the receiver may lack go to
 * spool files under `spool`, the other files stay in memory. The chain of each layer comes from
 * manifest.json (its last entry), or from what an earlier transfer of the image learnt, in which
 * case the layers the receiver has are not even spooled.
 */
async function spoolImage(
  ctx: HostContext,
  img: ImageRecord,
  have: Set<string>,
  spool: string,
  signal: AbortSignal,
): Promise<SpooledImage> {
  const known = await knownLayerChains(ctx, img.imageId);
  const out: SpooledImage = { entries: [], layers: [], chains: new Map() };
  let manifestJson: Buffer | undefined;
  const archive = await ctx.docker.images.save(img.imageId);
  const stop = () => archive.destroy(new Error("version transfer: cancelled"));
  signal.addEventListener("abort", stop, { once: true });
  try {
    await eachTarEntry(archive, async (h, body) => {
      const name = h.name.replace(/\/+$/, "");
      const type =
        h.type === "directory"
          ? "dir"
          : h.type === "symlink"
            ? "symlink"
            : h.type === "file"
              ? "file"
              : undefined;
      if (type === undefined || !name) {
        body.resume();
        return;
      }
      const entry: TransferEntry = {
        path: name,
        type,
        mode: (h.mode ?? 0o644) & 0o7777,
        uid: 0,
        gid: 0,
        mtime_ms: h.mtime?.getTime() ?? 0,
        size: type === "file" ? (h.size ?? 0) : 0,
        offset: 0,
        ...(type === "symlink" ? { target: h.linkname ?? "" } : {}),
      };
      if (type === "file" && name.endsWith("/layer.tar")) {
        const chain = known?.get(name);
        if (chain && have.has(chain)) {
          body.resume();
          return;
        }
        const file = join(spool, String(out.layers.length));
        await pipeline(body, createWriteStream(file, { flags: "wx", mode: 0o600 }));
        out.layers.push({ entry, file });
        return;
      }
      if (type !== "file") {
        body.resume();
        out.entries.push({ entry });
        return;
      }
      if (entry.size > MAX_ARCHIVE_FILE) {
        throw new DenvError(
          "docker",
          `the engine's archive of ${img.imageId} has a ${entry.size}-byte ${name}`,
        );
      }
      const bytes = await collect(body);
      if (name === "manifest.json") manifestJson = bytes;
      out.entries.push({ entry, bytes });
    });
  } finally {
    signal.removeEventListener("abort", stop);
  }
  out.chains = known ?? (await learnLayerChains(ctx, img.imageId, manifestJson));
  return out;
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

const chainsFile = (ctx: HostContext, imageId: string) =>
  join(ctx.stateDir, "transfer-cache", `${imageId.replace(/[^a-z0-9]/gi, "_")}.json`);

/** Which chain each `<dir>/layer.tar` of an image's archive is, when an earlier transfer learnt it. */
async function knownLayerChains(ctx: HostContext, imageId: string): Promise<Map<string, string> | undefined> {
  const cached = await readFile(chainsFile(ctx, imageId), "utf8").catch(() => undefined);
  return cached ? new Map(Object.entries(JSON.parse(cached) as Record<string, string>)) : undefined;
}

/**
 * Which chain each `<dir>/layer.tar` of an image's archive is, from the archive's manifest.json
 * (the engine names layer directories by ids of its own making); kept for the next transfer.
 */
async function learnLayerChains(
  ctx: HostContext,
  imageId: string,
  manifestJson: Buffer | undefined,
): Promise<Map<string, string>> {
  const info = await ctx.docker.images.info(imageId);
  if (!info) throw new DenvError("not_found", `image ${imageId} is missing on ${ctx.hostId}`);
  let manifest: Array<{ Layers?: string[] }> | undefined;
  try {
    manifest = manifestJson ? JSON.parse(manifestJson.toString("utf8")) : undefined;
  } catch {
    manifest = undefined;
  }
  const layers = manifest?.[0]?.Layers;
  if (!layers || layers.length !== info.diffIds.length) {
    throw new DenvError(
      "docker",
      `the engine's archive of ${imageId} does not list its ${info.diffIds.length} layers`,
    );
  }
  const chains = chainIds(info.diffIds);
  const map = Object.fromEntries(layers.map((l, i) => [l, chains[i] as string]));
  await mkdir(join(ctx.stateDir, "transfer-cache"), { recursive: true, mode: 0o700 });
  await writeFile(chainsFile(ctx, imageId), JSON.stringify(map));
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
  // Every image's archive is read from the engine from the start, while the volumes go.
  await mkdir(join(ctx.stateDir, "tmp"), { recursive: true, mode: 0o700 });
  const spool = await mkdtemp(join(ctx.stateDir, "tmp", "spool-"));
  const reading = new AbortController();
  const images = new Map<string, Promise<SpooledImage>>();
  try {
    for (const part of manifest.parts) {
      if (part.kind !== "image" || resume.done.includes(part.name)) continue;
      const img =
        part.name === "image:verifier" ? v.verifierImage : v.images[part.name.slice("image:".length)];
      if (!img) throw new DenvError("not_found", `version ${v.id} has no ${part.name}`);
      const dir = join(spool, String(images.size));
      const read = mkdir(dir).then(() => spoolImage(ctx, img, have, dir, reading.signal));
      // Awaited in its turn; until then a failure must not count as unhandled.
      read.catch(() => undefined);
      images.set(part.name, read);
    }
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
      /** An entry, then its bytes from `offset`: in memory, or read from a file. */
      const emit = async (entry: TransferEntry, bytes?: Buffer | { file: string }) => {
        await out.json(TransferRecordType.entry, entry);
        if (Buffer.isBuffer(bytes)) await out.data(bytes.subarray(entry.offset));
        else if (bytes) await out.file(bytes.file, entry.offset, entry.size);
        entries++;
      };
      if (part.kind === "image") {
        // The archive's entries in its order, its layers after them (their chains are known
        // only at its end): the same order on every attempt, as a resume needs.
        const image = await (images.get(part.name) as Promise<SpooledImage>);
        for (const { entry, bytes } of image.entries) {
          const offset = cursor.offsetOf(entry.path);
          if (offset === undefined) continue;
          await emit({ ...entry, offset }, bytes);
        }
        for (const { entry, file } of image.layers) {
          const chain = image.chains.get(entry.path);
          if (chain && have.has(chain)) continue;
          const offset = cursor.offsetOf(entry.path);
          if (offset === undefined) continue;
          await emit({ ...entry, offset }, { file });
          await rm(file, { force: true });
        }
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
          await emit(entry, { file: path });
        }
      } else if (vol) {
        for await (const e of walkTree(ctx.store.snapPath(vol.snapshot), special)) {
          const offset = cursor.offsetOf(e.path);
          if (offset === undefined) continue;
          const { abs, ...entry } = e;
          await emit({ ...entry, offset }, e.type === "file" ? { file: abs } : undefined);
        }
      }
      cursor.check(part.name);
      await out.json(TransferRecordType.partEnd, {
        name: part.name,
        entries,
        skipped_special: special.count,
      });
      sent.push(part.name);
    }
  } finally {
    reading.abort();
    await Promise.allSettled(images.values());
    await rm(spool, { recursive: true, force: true });
  }
  await out.json(TransferRecordType.end, {});
  await out.flush();
  return { parts: sent };
}
