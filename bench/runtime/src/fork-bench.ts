import { performance } from "node:perf_hooks";
import type { Runtime } from "@denv/denvd";
import type Docker from "dockerode";
import { log, settle } from "./host.js";
import { median } from "./stats.js";

/**
 * Benchmark 2: cold fork-to-ready. denv's fork (clone the volumes, new internal network and
 * firewall rule, create and start the services in dependency order, wait for health, egress
 * probe) versus the floor: the same containers from the same committed images created and
 * started through the Engine API, on a plain bridge network with fresh empty volumes, no
 * health wait, no denv logic.
 */

export interface ForkRun {
  denvMs: number;
  floorMs: number;
  /** denv's own breakdown (the fork's evidence). */
  evidence: { createMs?: number; startMs?: number; healthMs?: number; probeMs?: number; totalMs?: number };
  floor: { networkMs: number; volumesMs: number; createMs: number; startMs: number };
}

export interface ForkResult {
  stack: string;
  version: string;
  runs: ForkRun[];
  medians: {
    denvMs: number;
    floorMs: number;
    ratio: number;
    healthMs: number;
    probeMs: number;
    startMs: number;
    createMs: number;
  };
}

async function floorStart(
  rt: Runtime,
  docker: Docker,
  versionId: string,
  name: string,
  labels: Record<string, string>,
): Promise<{ ms: number; parts: ForkRun["floor"]; remove: () => Promise<void> }> {
  const version = await rt.host.records.getVersion(versionId);
  if (!version) throw new Error(`no version ${versionId}`);
  const plan = version.plan;
  const containers: Docker.Container[] = [];
  const volumes: string[] = [];
  let network: Docker.Network | undefined;
  const remove = async () => {
    for (const c of containers) await c.remove({ force: true, v: true }).catch(() => undefined);
    if (network) await network.remove().catch(() => undefined);
    for (const v of volumes) {
      await docker
        .getVolume(v)
        .remove({ force: true })
        .catch(() => undefined);
    }
  };
  try {
    const t0 = performance.now();
    network = await docker.createNetwork({ Name: name, Driver: "bridge", Labels: labels });
    const tNet = performance.now();
    for (const v of plan.volumes) {
      const volName = `${name}-${v}`;
      await docker.createVolume({ Name: volName, Labels: labels });
      volumes.push(volName);
    }
    const tVol = performance.now();
    for (const svc of plan.services) {
      const image = version.images[svc.name];
      if (!image) throw new Error(`version ${versionId} has no image for ${svc.name}`);
      containers.push(
        await docker.createContainer({
          name: `${name}-${svc.name}`,
          Image: image.imageId,
          Labels: labels,
          HostConfig: {
            NetworkMode: name,
            Mounts: svc.volumes.map((m) => ({
              Type: "volume" as const,
              Source: `${name}-${m.source}`,
              Target: m.target,
            })),
          },
          NetworkingConfig: { EndpointsConfig: { [name]: { Aliases: [svc.name] } } },
        }),
      );
    }
    const tCreated = performance.now();
    for (const c of containers) await c.start();
    const tStarted = performance.now();
    return {
      ms: tStarted - t0,
      parts: {
        networkMs: tNet - t0,
        volumesMs: tVol - tNet,
        createMs: tCreated - tVol,
        startMs: tStarted - tCreated,
      },
      remove,
    };
  } catch (err) {
    await remove();
    throw err;
  }
}

export async function forkBench(
  rt: Runtime,
  docker: Docker,
  opts: {
    stack: string;
    versionId: string;
    runs: number;
    runId: string;
    labels: Record<string, string>;
    check: () => void;
  },
): Promise<ForkResult> {
  const runs: ForkRun[] = [];
  for (let i = 0; i < opts.runs; i++) {
    const order = i % 2 === 0 ? ["denv", "floor"] : ["floor", "denv"];
    let denvMs = 0;
    let evidence: ForkRun["evidence"] = {};
    let floorMs = 0;
    let floor: ForkRun["floor"] = { networkMs: 0, volumesMs: 0, createMs: 0, startMs: 0 };
    for (const which of order) {
      opts.check();
      await settle();
      if (which === "denv") {
        const t0 = performance.now();
        const env = await rt.fork(opts.versionId, { name: `bench-fork-${i}` });
        denvMs = performance.now() - t0;
        const t = env.evidence.timings;
        evidence = {
          createMs: t.create_ms,
          startMs: t.start_ms,
          healthMs: t.health_ms,
          probeMs: t.probe_ms,
          totalMs: t.total_ms,
        };
        await rt.destroy(env.id);
      } else {
        const f = await floorStart(
          rt,
          docker,
          opts.versionId,
          `denv-bench-${opts.runId}-floor-${i}`,
          opts.labels,
        );
        floorMs = f.ms;
        floor = f.parts;
        await f.remove();
      }
    }
    runs.push({ denvMs, floorMs, evidence, floor });
    log(
      `fork ${opts.stack} ${i + 1}/${opts.runs}: denv ${denvMs.toFixed(0)} ms ` +
        `(create ${evidence.createMs}, start ${evidence.startMs}, health ${evidence.healthMs}, probe ${evidence.probeMs}), ` +
        `floor ${floorMs.toFixed(0)} ms (network ${floor.networkMs.toFixed(0)}, volumes ${floor.volumesMs.toFixed(0)}, ` +
        `create ${floor.createMs.toFixed(0)}, start ${floor.startMs.toFixed(0)})`,
    );
  }
  const denvMs = median(runs.map((r) => r.denvMs));
  const floorMs = median(runs.map((r) => r.floorMs));
  return {
    stack: opts.stack,
    version: opts.versionId,
    runs,
    medians: {
      denvMs,
      floorMs,
      ratio: denvMs / floorMs,
      healthMs: median(runs.map((r) => r.evidence.healthMs ?? Number.NaN)),
      probeMs: median(runs.map((r) => r.evidence.probeMs ?? Number.NaN)),
      startMs: median(runs.map((r) => r.evidence.startMs ?? Number.NaN)),
      createMs: median(runs.map((r) => r.evidence.createMs ?? Number.NaN)),
    },
  };
}
