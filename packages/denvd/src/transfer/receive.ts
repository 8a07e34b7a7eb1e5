import { createHash, randomBytes } from "node:crypto";
import { createReadStream } from "node:fs";
import { chmod, chown, lutimes, mkdir, readFile, rename, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import type { Readable } from "node:stream";
import {
  DenvError,
  Plan,
  parseVersionRef,
  TransferEntry,
  type TransferEvidence,
  TransferManifest,
  TransferRecordType,
  type TransferResume,
} from "@denv/spec";
import { pack } from "tar-stream";
import { z } from "zod";
import type { ImageRecord, VersionRecord } from "../records.js";
import type { HostContext } from "../runtime/host-context.js";
import { chainIds } from "./send.js";
import { discardTransfer, type Journal, readJournal, slug, stagingDir, writeJournal } from "./staging.js";
import { TreeWriter, walkTree } from "./tree.js";
import { parseJson, readRecords } from "./wire.js";

/**
 * The receiver's side of a version transfer. Everything lands in a staging directory of its
 * own (images as archive entries, the tests archive) or in store volumes made for it, with a
 * journal of what was verified; only when every part is in, the images are loaded (and their
 * ids checked against the manifest), the volumes snapshotted, and the version registered. An
 * attempt that breaks off leaves the journal: the next one resumes from it. Nothing is half
 * registered: the version record is written last.
 */

/** A volume part's own directory, sent with its part record. */
const RootAttrs = z.object({
  mode: z.number().int().nonnegative(),
  uid: z.number().int().nonnegative(),
  gid: z.number().int().nonnegative(),
  mtime_ms: z.number(),
});

/** Chain ids of every layer the engine has (through the images that use them). */
async function engineChains(ctx: HostContext): Promise<string[]> {
  const chains = new Set<string>();
  for (const id of await ctx.docker.images.allIds()) {
    const info = await ctx.docker.images.info(id);
    for (const c of chainIds(info?.diffIds ?? [])) chains.add(c);
  }
  return [...chains];
}

export interface ReceiveStreams {
  /** Bytes from the sender, relayed by the control plane. */
  inbound: AsyncIterable<Buffer>;
  /** Where the resume point goes (one JSON line). */
  sendResume(line: Buffer): Promise<void>;
}

export async function receiveVersion(
  ctx: HostContext,
  versionId: string,
  from: string,
  io: ReceiveStreams,
): Promise<{ record: VersionRecord; transfer: TransferEvidence }> {
  parseVersionRef(versionId);
  const t0 = Date.now();
  const existing = await ctx.records.getVersion(versionId);
  if (existing) {
    await io.sendResume(Buffer.from(`${JSON.stringify({ complete: true })}\n`));
    return { record: existing, transfer: emptyEvidence(from, t0) };
  }
  const dir = stagingDir(ctx, versionId);
  await mkdir(dir, { recursive: true, mode: 0o700 });
  let journal = await readJournal(dir);
  const resumedParts = journal ? [...journal.done] : [];
  const resumedBytes = journal?.bytes ?? 0;
  const resume: TransferResume = {
    complete: false,
    chain_ids: await engineChains(ctx),
    done: journal?.done ?? [],
    ...(journal?.current ? { current: journal.current } : {}),
  };
  await io.sendResume(Buffer.from(`${JSON.stringify(resume)}\n`));

  let manifest: TransferManifest | undefined;
  let writer: TreeWriter | undefined;
  let part: string | undefined;
  let partRoot: z.infer<typeof RootAttrs> | undefined;
  let bytes = 0;
  let records = 0;
  let lastSave = Date.now();
  let layersSent = 0;
  let special = 0;
  const save = async () => {
    if (!journal) return;
    if (writer && part) {
      const after = writer.lastComplete ?? journal.current?.after;
      const file = writer.current;
      journal.current = { part, ...(after !== undefined ? { after } : {}), ...(file ? { file } : {}) };
    }
    journal.bytes = resumedBytes + bytes;
    await writeJournal(dir, journal);
    lastSave = Date.now();
  };
  let finished = false;
  try {
    for await (const r of readRecords(io.inbound)) {
      records++;
      bytes += r.body.length;
      if (!manifest) {
        if (r.type !== TransferRecordType.manifest) throw wire("the first record is not the manifest");
        manifest = TransferManifest.parse(parseJson(r));
        if (manifest.version !== versionId)
          throw wire(`the sender sent ${manifest.version}, not ${versionId}`);
        const sha = createHash("sha256").update(r.body).digest("hex");
        if (journal && journal.manifest_sha !== sha) {
          await discardTransfer(ctx, versionId);
          throw new DenvError(
            "conflict",
            `version transfer: ${versionId} on ${from} is not what an earlier attempt got; it starts over`,
          );
        }
        journal ??= { version: versionId, from, manifest_sha: sha, done: [], volumes: {}, bytes: 0 };
        await writeJournal(dir, journal);
        continue;
      }
      const j = journal as Journal;
      switch (r.type) {
        case TransferRecordType.part: {
          const head = parseJson(r) as { name?: unknown; root?: unknown };
          const name = head.name;
          const p = manifest.parts.find((x) => x.name === name);
          if (!p || j.done.includes(p.name) || writer) throw wire(`unexpected part ${String(name)}`);
          part = p.name;
          const resumed = j.current?.part === p.name;
          if (!resumed) delete j.current;
          let root = join(dir, "parts", slug(p.name));
          if (p.kind === "volume") {
            const vol = p.name.slice("volume:".length);
            let live = j.volumes[vol];
            if (!live) {
              live = `xfer-${randomBytes(4).toString("hex")}`;
              j.volumes[vol] = live;
              await writeJournal(dir, j);
              await ctx.store.create(live);
            }
            root = ctx.store.livePath(live);
          } else if (!resumed) await rm(root, { recursive: true, force: true });
          writer = await TreeWriter.open(root, { owners: p.kind === "volume", resumed });
          partRoot = p.kind === "volume" ? RootAttrs.parse(head.root) : undefined;
          break;
        }
        case TransferRecordType.entry: {
          if (!writer) throw wire("an entry outside a part");
          const entry = TransferEntry.parse(parseJson(r));
          if (entry.offset > 0 && (await writer.have(entry.path)) < entry.offset) {
            throw wire(`${entry.path} resumes at ${entry.offset}, past what this host has`);
          }
          if (entry.path.endsWith("/layer.tar")) layersSent++;
          await writer.begin(entry);
          break;
        }
        case TransferRecordType.data:
          if (!writer) throw wire("data outside a part");
          await writer.write(r.body);
          break;
        case TransferRecordType.partEnd: {
          if (!writer || !part) throw wire("a part ended that did not begin");
          const skipped = (parseJson(r) as { skipped_special?: unknown }).skipped_special;
          if (typeof skipped === "number" && Number.isInteger(skipped) && skipped >= 0) special += skipped;
          await writer.finish();
          if (partRoot) {
            // The volume's own directory: a service's chown of its mount point is part of the data.
            await chown(writer.root, partRoot.uid, partRoot.gid);
            await chmod(writer.root, partRoot.mode & 0o7777);
            await lutimes(writer.root, partRoot.mtime_ms / 1000, partRoot.mtime_ms / 1000);
          }
          writer = undefined;
          j.done.push(part);
          delete j.current;
          part = undefined;
          await save();
          break;
        }
        case TransferRecordType.end:
          if (writer) throw wire("the transfer ended inside a part");
          finished = true;
          break;
        default:
          throw wire("a second manifest");
      }
      if (Date.now() - lastSave > 1000) await save();
      if (finished) break;
    }
  } catch (err) {
    await writer?.close();
    await save().catch(() => undefined);
    throw err;
  }
  if (!manifest || !finished) {
    await writer?.close();
    await save().catch(() => undefined);
    throw new DenvError("conflict", `version transfer: the stream of ${versionId} from ${from} ended early`);
  }
  const j = journal as Journal;
  const missing = manifest.parts.filter((p) => !j.done.includes(p.name));
  if (missing.length > 0) throw wire(`parts missing at the end: ${missing.map((p) => p.name).join(", ")}`);

  const record = await register(ctx, manifest, dir, j);
  await rm(dir, { recursive: true, force: true });
  const chains = Object.values(manifest.record.images).reduce((n, i) => n + i.layers, 0);
  return {
    record,
    transfer: {
      from,
      bytes: bytes + resumedBytes,
      records,
      parts: manifest.parts.map((p) => p.name),
      resumed_parts: resumedParts,
      resumed_bytes: resumedBytes,
      layers_sent: layersSent,
      layers_skipped: Math.max(0, chains - layersSent),
      skipped_special: special,
      duration_ms: Date.now() - t0,
    },
  };
}

function wire(why: string): DenvError {
  return new DenvError("invalid_request", `version transfer: ${why}`);
}

function emptyEvidence(from: string, t0: number): TransferEvidence {
  return {
    from,
    bytes: 0,
    records: 0,
    parts: [],
    resumed_parts: [],
    resumed_bytes: 0,
    layers_sent: 0,
    layers_skipped: 0,
    skipped_special: 0,
    duration_ms: Date.now() - t0,
  };
}

/** Loads one staged image archive under this host's own tag; its id must be the manifest's. */
async function loadImage(
  ctx: HostContext,
  root: string,
  expected: TransferManifest["record"]["images"][string],
  tag: { repo: string; tag: string },
): Promise<ImageRecord> {
  const manifestPath = join(root, "manifest.json");
  const m = JSON.parse(await readFile(manifestPath, "utf8")) as Array<Record<string, unknown>>;
  if (!Array.isArray(m) || m.length !== 1) throw wire("an image archive must hold exactly one image");
  (m[0] as Record<string, unknown>).RepoTags = [`${tag.repo}:${tag.tag}`];
  await writeFile(manifestPath, JSON.stringify(m));
  await rm(join(root, "repositories"), { force: true });
  await ctx.docker.images.load(tarOf(root));
  const info = await ctx.docker.images.info(`${tag.repo}:${tag.tag}`);
  if (!info || info.id !== expected.image_id) {
    throw new DenvError(
      "conflict",
      `version transfer: the loaded image is ${info?.id ?? "missing"}, the sender announced ${expected.image_id}`,
    );
  }
  return {
    image: `${tag.repo}:${tag.tag}`,
    imageId: info.id,
    repoDigests: [],
    layers: info.layers,
    ...(expected.squashed ? { squashed: true } : {}),
  };
}

/** A tar stream of a staged directory (files as they are: the engine reads this archive). */
function tarOf(root: string): Readable {
  const p = pack();
  void (async () => {
    try {
      for await (const e of walkTree(root, { count: 0 })) {
        if (e.type === "dir") p.entry({ name: `${e.path}/`, type: "directory", mode: 0o755 });
        else if (e.type === "symlink") p.entry({ name: e.path, type: "symlink", linkname: e.target ?? "" });
        else {
          await new Promise<void>((resolve, reject) => {
            const w = p.entry({ name: e.path, size: e.size, mode: 0o644 }, (err) =>
              err ? reject(err) : resolve(),
            );
            createReadStream(e.abs)
              .on("error", reject)
              .pipe(w as unknown as NodeJS.WritableStream);
          });
        }
      }
      p.finalize();
    } catch (err) {
      p.destroy(err as Error);
    }
  })();
  return p as unknown as Readable;
}

async function register(
  ctx: HostContext,
  m: TransferManifest,
  dir: string,
  j: Journal,
): Promise<VersionRecord> {
  const r = m.record;
  const plan = Plan.parse(r.plan);
  if (plan.name !== r.project) throw wire(`the plan is of ${plan.name}, the version of ${r.project}`);
  const repoOf = (svc: string) => `denv-version/${ctx.hostId}-${r.project}-${svc}`;
  const images: Record<string, ImageRecord> = {};
  const loaded: string[] = [];
  const partDir = (name: string) => join(dir, "parts", slug(name));
  const volumes: VersionRecord["volumes"] = {};
  try {
    // The engine loads the images (each on its own) while the volumes are snapshotted and measured.
    const byService: Array<[string, ImageRecord]> = [];
    const work = await Promise.allSettled([
      ...Object.entries(r.images).map(async ([svc, img], i) => {
        const rec = await loadImage(ctx, partDir(`image:${svc}`), img, {
          repo: repoOf(svc),
          tag: `v${r.number}`,
        });
        loaded.push(rec.image);
        byService[i] = [svc, rec];
      }),
      (async () => {
        for (const [name, live] of Object.entries(j.volumes)) {
          const snapId = `${r.project}-v${r.number}-${name}-${randomBytes(3).toString("hex")}`;
          await ctx.store.snapshot(live, snapId);
          volumes[name] = { snapshot: snapId, bytes: await ctx.store.size(ctx.store.snapPath(snapId)) };
        }
      })(),
    ]);
    for (const w of work) if (w.status === "rejected") throw w.reason;
    for (const [svc, rec] of byService) images[svc] = rec;
    let verifierImage: ImageRecord | undefined;
    if (r.verifier_image) {
      const same = Object.values(images).find((i) => i.imageId === r.verifier_image?.image_id);
      verifierImage = same
        ? { ...same }
        : await loadImage(ctx, partDir("image:verifier"), r.verifier_image, {
            repo: repoOf("verifier"),
            tag: `v${r.number}`,
          });
      if (!same) loaded.push(verifierImage.image);
    }
    let testsTar: string | undefined;
    if (r.tests) {
      testsTar = join(ctx.stateDir, "tests", `${r.project}-${randomBytes(6).toString("hex")}.tar`);
      await rename(join(partDir("file:tests"), "tests.tar"), testsTar);
    }
    const rec: VersionRecord = {
      id: m.version,
      project: r.project,
      number: r.number,
      sourceEnvironment: r.source_environment,
      ...(r.parent_version ? { parentVersion: r.parent_version } : {}),
      plan,
      images,
      ...(verifierImage ? { verifierImage } : {}),
      ...(testsTar ? { testsTar } : {}),
      volumes,
      method: ctx.store.method,
      timings: { flushMs: 0, frozenMs: 0, commitMs: 0, volumesMs: 0, squashMs: 0, totalMs: 0 },
      sizes: { layerBytes: r.sizes.layer_bytes, volumeBytes: r.sizes.volume_bytes },
      createdAt: r.created_at,
      receivedFrom: j.from,
    };
    await ctx.records.putVersion(rec);
    for (const live of Object.values(j.volumes)) await ctx.store.removeLive(live);
    ctx.log(`${m.version}: received from ${j.from}`);
    return rec;
  } catch (err) {
    for (const img of loaded) await ctx.docker.images.remove(img).catch(() => undefined);
    throw err;
  }
}
