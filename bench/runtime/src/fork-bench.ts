import { performance } from "node:perf_hooks";
import type { Runtime } from "@denv/denvd";
import type Docker from "dockerode";
import { rawExec } from "./docker-raw.js";
import { log, settle } from "./host.js";
import { median } from "./stats.js";

/**
 * Benchmark 2: cold fork-to-ready. denv's fork (clone the volumes, new internal network and
 * firewall rule, create and start the services as their depends_on conditions allow, wait for
 * health, egress probe) versus floors: the same containers from the same committed images
 * created and started through the Engine API, on a plain bridge network with fresh empty
 * volumes, no denv logic. Which floors a stack gets (`FloorMode`):
 *
 * - `sequential` (the README's floor): created and started one after the other, in plan order,
 *   no health wait;
 * - `concurrent`: created and started all at once, no health wait (what the engine can do for
 *   these containers at best);
 * - `health`: started in plan order, each `service_healthy` dependency's compose healthcheck
 *   exec'd every 50 ms until it passes before its dependant starts, and at the end every
 *   service's check until it passes: the least a start that honours the file does.
 */

export type FloorMode = "sequential" | "concurrent" | "health";

interface FloorParts {
  networkMs: number;
  volumesMs: number;
  createMs: number;
  /** Start to ready: the starts, and in `health` mode the health waits between and after them. */
  startMs: number;
}

export interface ForkRun {
  denvMs: number;
  /** Each floor's wall time, by mode. */
  floorMs: Partial<Record<FloorMode, number>>;
  /** denv's own breakdown (the fork's evidence timings, verbatim). */
  evidence: Record<string, unknown>;
  floor: Partial<Record<FloorMode, FloorParts>>;
}

export interface ForkResult {
  stack: string;
  version: string;
  floors: FloorMode[];
  runs: ForkRun[];
  medians: {
    denvMs: number;
    floorMs: Partial<Record<FloorMode, number>>;
    /** denv / floor, by mode. */
    ratio: Partial<Record<FloorMode, number>>;
    healthMs: number;
    probeMs: number;
    startMs: number;
    createMs: number;
    networkMs: number;
    firewallMs: number;
    volumesMs: number;
    containersMs: number;
    baselineMs: number;
  };
}

async function floorStart(
  rt: Runtime,
  docker: Docker,
  versionId: string,
  name: string,
  labels: Record<string, string>,
  mode: FloorMode,
): Promise<{ ms: number; parts: FloorParts; remove: () => Promise<void> }> {
  const version = await rt.host.records.getVersion(versionId);
  if (!version) throw new Error(`no version ${versionId}`);
  const plan = version.plan;
  const containers = new Map<string, Docker.Container>();
  const volumes: string[] = [];
  let network: Docker.Network | undefined;
  const remove = async () => {
    for (const c of containers.values()) await c.remove({ force: true, v: true }).catch(() => undefined);
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
    const create = async (svc: (typeof plan.services)[number]) => {
      const image = version.images[svc.name];
      if (!image) throw new Error(`version ${versionId} has no image for ${svc.name}`);
      const c = await docker.createContainer({
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
      });
      containers.set(svc.name, c);
    };
    if (mode === "concurrent") await Promise.all(plan.services.map(create));
    else for (const svc of plan.services) await create(svc);
    const tCreated = performance.now();
    const container = (svc: string) => containers.get(svc) as Docker.Container;
    if (mode === "concurrent") {
      await Promise.all(plan.services.map((svc) => container(svc.name).start()));
    } else if (mode === "sequential") {
      for (const svc of plan.services) await container(svc.name).start();
    } else {
      const healthy = new Map<string, Promise<void>>();
      const waitHealthy = (svcName: string) => {
        let p = healthy.get(svcName);
        if (!p) {
          const svc = plan.services.find((s) => s.name === svcName);
          p = pollCheck(docker, container(svcName).id, checkArgv(svc?.healthcheck?.test ?? []));
          healthy.set(svcName, p);
        }
        return p;
      };
      for (const svc of plan.services) {
        for (const dep of svc.dependsOn)
          if (dep.condition === "service_healthy") await waitHealthy(dep.service);
        await container(svc.name).start();
      }
      await Promise.all(plan.services.map((svc) => waitHealthy(svc.name)));
    }
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

/** The compose healthcheck as an argv (empty: none to run). */
function checkArgv(test: string[]): string[] {
  if (test[0] === "CMD-SHELL") return ["/bin/sh", "-c", test.slice(1).join(" ")];
  if (test[0] === "CMD") return test.slice(1);
  return [];
}

/** Execs the check until it exits 0, 50 ms apart (as denvd polls a starting service); gives up after 60 s. */
async function pollCheck(docker: Docker, containerId: string, argv: string[]): Promise<void> {
  if (argv.length === 0) return;
  const deadline = performance.now() + 60_000;
  for (;;) {
    const r = await rawExec(docker, containerId, argv).catch(() => undefined);
    if (r?.exitCode === 0) return;
    if (performance.now() > deadline) throw new Error(`floor: healthcheck of ${containerId} never passed`);
    await new Promise((r) => setTimeout(r, 50));
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
    floors: FloorMode[];
    check: () => void;
  },
): Promise<ForkResult> {
  const runs: ForkRun[] = [];
  const variants: Array<"denv" | FloorMode> = ["denv", ...opts.floors];
  for (let i = 0; i < opts.runs; i++) {
    // Each run starts with another one of them: none is always first after the settle.
    const order = variants.map((_, k) => variants[(i + k) % variants.length] as "denv" | FloorMode);
    const run: ForkRun = { denvMs: 0, floorMs: {}, evidence: {}, floor: {} };
    for (const which of order) {
      opts.check();
      await settle();
      if (which === "denv") {
        const t0 = performance.now();
        const env = await rt.fork(opts.versionId, { name: `bench-fork-${i}` });
        run.denvMs = performance.now() - t0;
        run.evidence = { ...env.evidence.timings };
        await rt.destroy(env.id);
      } else {
        const f = await floorStart(
          rt,
          docker,
          opts.versionId,
          `denv-bench-${opts.runId}-floor-${which}-${i}`,
          opts.labels,
          which,
        );
        run.floorMs[which] = f.ms;
        run.floor[which] = f.parts;
        await f.remove();
      }
    }
    runs.push(run);
    const e = run.evidence as Record<string, number | undefined>;
    log(
      `fork ${opts.stack} ${i + 1}/${opts.runs}: denv ${run.denvMs.toFixed(0)} ms ` +
        `(create ${e.create_ms} [network ${e.network_ms}, firewall ${e.firewall_ms}, volumes ${e.volumes_ms}, ` +
        `containers ${e.containers_ms}], start ${e.start_ms}, health ${e.health_ms}, baseline ${e.baseline_ms}, probe ${e.probe_ms}); ` +
        opts.floors
          .map((m) => {
            const p = run.floor[m];
            return `floor ${m} ${(run.floorMs[m] ?? 0).toFixed(0)} ms (network ${p?.networkMs.toFixed(0)}, volumes ${p?.volumesMs.toFixed(0)}, create ${p?.createMs.toFixed(0)}, start ${p?.startMs.toFixed(0)})`;
          })
          .join("; "),
    );
  }
  const denvMs = median(runs.map((r) => r.denvMs));
  const floorMs: ForkResult["medians"]["floorMs"] = {};
  const ratio: ForkResult["medians"]["ratio"] = {};
  for (const m of opts.floors) {
    floorMs[m] = median(runs.map((r) => r.floorMs[m] ?? Number.NaN));
    ratio[m] = denvMs / (floorMs[m] as number);
  }
  const ev = (key: string) => median(runs.map((r) => (r.evidence[key] as number | undefined) ?? Number.NaN));
  return {
    stack: opts.stack,
    version: opts.versionId,
    floors: opts.floors,
    runs,
    medians: {
      denvMs,
      floorMs,
      ratio,
      healthMs: ev("health_ms"),
      probeMs: ev("probe_ms"),
      startMs: ev("start_ms"),
      createMs: ev("create_ms"),
      networkMs: ev("network_ms"),
      firewallMs: ev("firewall_ms"),
      volumesMs: ev("volumes_ms"),
      containersMs: ev("containers_ms"),
      baselineMs: ev("baseline_ms"),
    },
  };
}
