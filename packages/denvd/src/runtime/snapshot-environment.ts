import { randomBytes } from "node:crypto";
import { DenvError, versionImageLabels } from "@denv/spec";
import type { ImageRecord, VersionRecord } from "../records.js";
import { freezeAll } from "./freeze.js";
import { type HostContext, requireEnvironment } from "./host-context.js";
import { type VersionInfo, versionInfo } from "./host-reports.js";
import { noPhases, type PhaseListener } from "./phase-listener.js";

/**
 * A consistent snapshot of a whole environment: flush, freeze every service at one point,
 * commit each writable layer, snapshot each volume, thaw. Process memory is not captured
 * (CRIU does not work on these kernels): forks start their services fresh from this disk state.
 */
export async function snapshotEnvironment(
  ctx: HostContext,
  envId: string,
  opts: { command?: string; onPhase?: PhaseListener; number?: number } = {},
): Promise<VersionInfo> {
  const phase = opts.onPhase ?? noPhases;
  return ctx.locks.with(envId, async () => {
    const env = await requireEnvironment(ctx, envId);
    const command = opts.command ?? `snapshot-${randomBytes(4).toString("hex")}`;
    const versions = (await ctx.records.versions()).filter((v) => v.project === env.project);
    // The control plane numbers versions across hosts; alone, the host numbers them itself.
    const number = opts.number ?? versions.reduce((n, v) => Math.max(n, v.number), 0) + 1;
    const id = `${env.project}@v${number}`;
    if (versions.some((v) => v.number === number)) {
      throw new DenvError("conflict", `version ${id} exists on host ${ctx.hostId}`);
    }
    const t0 = Date.now();

    const snapVolumes = env.plan.snapshotVolumes.filter((v) => env.volumes[v]);
    // Flush first so that the frozen window does not pay for writing dirty pages.
    await Promise.all(snapVolumes.map((v) => ctx.store.flush((env.volumes[v] as { store: string }).store)));
    const tFlushed = Date.now();

    const states = await Promise.all(
      Object.entries(env.containers).map(async ([svc, cid]) => ({
        svc,
        cid,
        state: await ctx.docker.containers.inspect(cid),
      })),
    );
    const running = states.filter((s) => s.state?.running && !s.state.paused);
    const images: Record<string, ImageRecord> = {};
    const volumes: VersionRecord["volumes"] = {};
    const snapIds: Record<string, string> = {};
    let tFrozen = 0;
    let tCommitted = 0;
    let tThawed = 0;
    phase.start("freeze");
    // All or none: a pause that fails leaves nothing paused (and the freezer's transient
    // "unable to freeze" is retried). The window opens with the first pause of the attempt that
    // froze them, not when the last one returns.
    const { attempts, frozenAt } = await freezeAll(
      ctx.docker.containers,
      running.map((s) => s.cid),
    );
    tFrozen = frozenAt;
    phase.end("freeze", { paused: running.map((s) => s.svc), ...(attempts > 1 ? { attempts } : {}) });
    try {
      phase.start("capture layers");
      const repoOf = (svc: string) => `denv-version/${ctx.hostId}-${env.project}-${svc}`;
      await Promise.all(
        states.map(async ({ svc, cid }) => {
          const imageId = await ctx.docker.images.commit(cid, {
            repo: repoOf(svc),
            tag: `v${number}`,
            labels: versionImageLabels({
              host: ctx.hostId,
              project: env.project,
              version: id,
              service: svc,
              command,
            }),
          });
          images[svc] = { image: `${repoOf(svc)}:v${number}`, imageId, repoDigests: [], layers: 0 };
        }),
      );
      tCommitted = Date.now();
      phase.end("capture layers", { committed: states.map((s) => s.svc) });
      phase.start("capture volumes");
      await Promise.all(
        snapVolumes.map(async (v) => {
          const snapId = `${env.project}-v${number}-${v}-${randomBytes(3).toString("hex")}`;
          await ctx.store.snapshot((env.volumes[v] as { store: string }).store, snapId);
          snapIds[v] = snapId;
        }),
      );
      phase.end("capture volumes", { volumes: snapVolumes });
    } catch (err) {
      for (const img of Object.values(images)) await ctx.docker.images.remove(img.image);
      for (const snap of Object.values(snapIds)) await ctx.store.removeSnapshot(snap);
      throw err;
    } finally {
      phase.start("thaw");
      await Promise.all(running.map((s) => ctx.docker.containers.unpause(s.cid).catch(() => undefined)));
      tThawed = Date.now();
      phase.end("thaw", { frozen_ms: tThawed - tFrozen });
    }

    phase.start("record");
    // Squash outside the frozen window: long fork-of-fork chains would hit overlay2's layer limit.
    let layerBytes = 0;
    for (const [svc, img] of Object.entries(images)) {
      const info = await ctx.docker.images.info(img.imageId);
      if (!info) throw new DenvError("docker", `committed image of ${svc} is missing`);
      img.layers = info.layers;
      const baseSize = (await ctx.docker.images.info(env.images[svc]?.imageId ?? ""))?.size ?? 0;
      layerBytes += Math.max(0, info.size - baseSize);
      if (info.layers > ctx.settings.squashThreshold) {
        const [repo = "", tag = ""] = img.image.split(/:(?=[^:]*$)/);
        img.imageId = await ctx.docker.images.squash(img.imageId, { repo, tag }, info);
        img.layers = 1;
        img.squashed = true;
      }
    }
    const tSquashed = Date.now();
    let volumeBytes = 0;
    for (const [v, snapId] of Object.entries(snapIds)) {
      const bytes = await ctx.store.size(ctx.store.snapPath(snapId));
      volumes[v] = { snapshot: snapId, bytes };
      volumeBytes += bytes;
    }
    const rec: VersionRecord = {
      id,
      project: env.project,
      number,
      sourceEnvironment: env.id,
      parentVersion: env.parentVersion,
      plan: env.plan,
      images,
      verifierImage: env.verifierImage,
      testsTar: env.testsTar,
      volumes,
      method: ctx.store.method,
      timings: {
        flushMs: tFlushed - t0,
        frozenMs: tThawed - tFrozen,
        commitMs: tCommitted - tFrozen,
        volumesMs: tThawed - tCommitted,
        squashMs: tSquashed - tThawed,
        totalMs: Date.now() - t0,
      },
      sizes: { layerBytes, volumeBytes },
      createdAt: new Date().toISOString(),
    };
    await ctx.records.putVersion(rec);
    ctx.log(`${id}: snapshot of ${env.id} (${rec.method}, frozen ${rec.timings.frozenMs} ms)`);
    const t = rec.timings;
    phase.end("record", {
      version: id,
      method: rec.method,
      sizes: { layer_bytes: layerBytes, volume_bytes: volumeBytes },
      timings: {
        flush_ms: t.flushMs,
        frozen_ms: t.frozenMs,
        commit_ms: t.commitMs,
        volumes_ms: t.volumesMs,
        squash_ms: t.squashMs,
        total_ms: t.totalMs,
      },
    });
    return versionInfo(rec);
  });
}
