import { chown, mkdir, rm, stat } from "node:fs/promises";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import type { Runtime, VersionInfo } from "@denv/denvd";
import type Docker from "dockerode";
import { bash, log, settle } from "./host.js";
import { median } from "./stats.js";

/**
 * Benchmark 1: a consistent snapshot of the quickstart stack with a 1 GB / 10k-file volume and
 * a writer running, by denv versus the plain way on the same containers and data: pause both,
 * `docker commit` both, `tar | zstd -1` the volumes, unpause.
 */

export interface SnapshotParams {
  runs: number;
  /** One unmeasured pair first (the first read of fresh data is slow on both sides). */
  warmup: boolean;
  files: number;
  totalBytes: number;
}

export interface DenvSnapshotRun {
  version: string;
  method: string;
  wallMs: number;
  flushMs: number;
  frozenMs: number;
  commitMs: number;
  volumesMs: number;
  squashMs: number;
  totalMs: number;
  /**
   * totalMs minus flush, frozen and squash: the inspect and pause before the frozen window, and
   * after the thaw the sizes of the volume snapshots (`du -sb`, which walks every file).
   */
  otherMs: number;
  layerBytes: number;
  volumeBytes: number;
}

export interface BaselineSnapshotRun {
  pauseMs: number;
  commitMs: number;
  tarMs: number;
  unpauseMs: number;
  frozenMs: number;
  totalMs: number;
  archiveBytes: number;
}

export interface SnapshotResult {
  params: SnapshotParams;
  setup: { deployMs: number; fillMs: number; files: number; bytes: number };
  denv: DenvSnapshotRun[];
  baseline: BaselineSnapshotRun[];
  warmup?: { denv: DenvSnapshotRun; baseline: BaselineSnapshotRun };
  medians: {
    denvTotalMs: number;
    denvFrozenMs: number;
    denvWallMs: number;
    baselineTotalMs: number;
    baselineFrozenMs: number;
    speedup: number;
  };
  /** The last version, kept for the fork benchmark. */
  keptVersion: string;
}

/** Writes `files` files of random bytes under /bulk from inside the container, in one process. */
const FILL = `
import os, sys
files, size = int(sys.argv[1]), int(sys.argv[2])
for i in range(files):
    d = "/bulk/d%03d" % (i // 100)
    if i % 100 == 0:
        os.makedirs(d, exist_ok=True)
    with open("%s/f%05d.bin" % (d, i), "wb") as f:
        f.write(os.urandom(size))
`;

/** The dirty writer: appends to the volume and to the writable layer every 10 ms. */
const WRITER = `
import os, time
open("/tmp/bench-writer.pid", "w").write(str(os.getpid()))
a = open("/bulk/writer.log", "a")
b = open("/tmp/writer.log", "a")
n = 0
while True:
    n += 1
    line = "%d %d\\n" % (n, time.time_ns())
    a.write(line); a.flush()
    b.write(line); b.flush()
    time.sleep(0.01)
`;

export interface QuickstartEnv {
  id: string;
  agentContainer: string;
  containers: Record<string, string>;
  /** Host directory of each snapshotted volume (the live subvolume in denv's store). */
  volumePaths: Record<string, string>;
}

export async function describeEnv(rt: Runtime, envId: string): Promise<QuickstartEnv> {
  const rec = await rt.host.records.getEnvironment(envId);
  if (!rec) throw new Error(`no environment ${envId}`);
  const volumePaths: Record<string, string> = {};
  for (const v of rec.plan.snapshotVolumes) {
    const vol = rec.volumes[v];
    if (vol) volumePaths[v] = rt.host.store.livePath(vol.store);
  }
  const agentContainer = rec.containers[rec.plan.agent.service];
  if (!agentContainer) throw new Error(`${envId} has no agent container`);
  return { id: envId, agentContainer, containers: { ...rec.containers }, volumePaths };
}

/** Fills /bulk (as the agent, through denv's exec) and starts the writer. */
export async function prepareData(
  rt: Runtime,
  env: QuickstartEnv,
  params: SnapshotParams,
): Promise<{ fillMs: number; files: number; bytes: number }> {
  // A fresh volume is root's. A root exec cannot chown it: Docker gives an exec no effective
  // capabilities when the service runs as a non-root user. Give it to the agent on the host.
  const bulk = env.volumePaths.bulk;
  if (!bulk) throw new Error("the bench stack has no bulk volume");
  await chown(bulk, 1000, 1000);
  const t0 = performance.now();
  const size = Math.floor(params.totalBytes / params.files);
  const fill = await rt.exec(env.id, {
    cmd: ["python3", "-c", FILL, String(params.files), String(size)],
    timeout: 900,
  });
  if (fill.exitCode !== 0) throw new Error(`filling /bulk failed: ${fill.stderr.toString()}`);
  const fillMs = performance.now() - t0;
  const count = await rt.exec(env.id, { shell: "find /bulk -type f | wc -l; du -sb /bulk | cut -f1" });
  const [files = 0, bytes = 0] = count.stdout.toString().trim().split("\n").map(Number);
  const w = await rt.exec(env.id, {
    shell: `nohup python3 -c '${WRITER.replace(/'/g, "'\\''")}' >/dev/null 2>&1 &`,
  });
  if (w.exitCode !== 0) throw new Error(`starting the writer failed: ${w.stderr.toString()}`);
  // The writer must be writing before anything is measured.
  for (let i = 0; i < 50; i++) {
    const r = await rt.exec(env.id, { shell: "test -s /bulk/writer.log && wc -l < /bulk/writer.log" });
    if (r.exitCode === 0 && Number(r.stdout.toString()) > 5) break;
    await new Promise((r2) => setTimeout(r2, 100));
  }
  return { fillMs, files, bytes };
}

export async function stopWriter(rt: Runtime, envId: string): Promise<void> {
  await rt.exec(envId, { shell: 'kill "$(cat /tmp/bench-writer.pid)" 2>/dev/null || true' });
}

async function denvRun(rt: Runtime, envId: string): Promise<{ run: DenvSnapshotRun; version: VersionInfo }> {
  const t0 = performance.now();
  const v = await rt.snapshot(envId);
  const wallMs = performance.now() - t0;
  const t = v.timings;
  return {
    version: v,
    run: {
      version: v.id,
      method: v.method,
      wallMs,
      ...t,
      otherMs: t.totalMs - t.flushMs - t.frozenMs - t.squashMs,
      layerBytes: v.sizes.layerBytes,
      volumeBytes: v.sizes.volumeBytes,
    },
  };
}

async function baselineRun(
  docker: Docker,
  env: QuickstartEnv,
  workDir: string,
  labels: Record<string, string>,
  tag: string,
): Promise<BaselineSnapshotRun> {
  const containers = Object.entries(env.containers);
  const archive = join(workDir, `${tag}.tar.zst`);
  const images: string[] = [];
  const t0 = performance.now();
  await Promise.all(containers.map(([, id]) => docker.getContainer(id).pause()));
  const tPaused = performance.now();
  let tCommitted = tPaused;
  let tTarred = tPaused;
  try {
    await Promise.all(
      containers.map(async ([svc, id]) => {
        const res = (await docker.getContainer(id).commit({
          repo: `denv-bench/baseline-${svc}`,
          tag,
          pause: false,
          changes: Object.entries(labels).map(([k, v]) => `LABEL ${k}=${JSON.stringify(v)}`),
        })) as { Id: string };
        images.push(res.Id);
      }),
    );
    tCommitted = performance.now();
    // One archive of every snapshotted volume, as a plain host would keep it.
    const dirs = Object.values(env.volumePaths).map((d) => d.replace(/^\/+/, ""));
    await bash('out=$1; shift; tar -C / -cf - "$@" | zstd -1 -q -o "$out"', [archive, ...dirs]);
    tTarred = performance.now();
  } finally {
    await Promise.all(containers.map(([, id]) => docker.getContainer(id).unpause()));
  }
  const tEnd = performance.now();
  const archiveBytes = (await stat(archive)).size;
  await rm(archive, { force: true });
  for (const id of images) {
    await docker
      .getImage(id)
      .remove({ force: true })
      .catch(() => undefined);
  }
  return {
    pauseMs: tPaused - t0,
    commitMs: tCommitted - tPaused,
    tarMs: tTarred - tCommitted,
    unpauseMs: tEnd - tTarred,
    frozenMs: tEnd - tPaused,
    totalMs: tEnd - t0,
    archiveBytes,
  };
}

export async function snapshotBench(
  rt: Runtime,
  docker: Docker,
  env: QuickstartEnv,
  params: SnapshotParams,
  opts: {
    workDir: string;
    labels: Record<string, string>;
    setup: SnapshotResult["setup"];
    check: () => void;
  },
): Promise<SnapshotResult> {
  await mkdir(opts.workDir, { recursive: true });
  const denv: DenvSnapshotRun[] = [];
  const baseline: BaselineSnapshotRun[] = [];
  let kept: VersionInfo | undefined;
  let warmup: SnapshotResult["warmup"];
  if (params.warmup) {
    await settle();
    const w = await denvRun(rt, env.id);
    await rt.deleteVersion(w.version.id);
    await settle();
    warmup = { denv: w.run, baseline: await baselineRun(docker, env, opts.workDir, opts.labels, "warmup") };
    log(
      `snapshot warm-up (not counted): denv ${w.run.totalMs} ms, baseline ${warmup.baseline.totalMs.toFixed(0)} ms`,
    );
  }
  for (let i = 0; i < params.runs; i++) {
    // Alternate which one goes first, so that drift (page cache, writeback) hits both alike.
    const order = i % 2 === 0 ? ["denv", "baseline"] : ["baseline", "denv"];
    for (const which of order) {
      opts.check();
      await settle();
      if (which === "denv") {
        const { run, version } = await denvRun(rt, env.id);
        denv.push(run);
        log(
          `snapshot ${i + 1}/${params.runs} denv: total ${run.totalMs} ms, frozen ${run.frozenMs} ms ` +
            `(flush ${run.flushMs}, commit ${run.commitMs}, volumes ${run.volumesMs}, other ${run.otherMs}; wall ${run.wallMs.toFixed(0)})`,
        );
        // Keep only the newest version (the fork benchmark starts from it).
        if (kept) await rt.deleteVersion(kept.id);
        kept = version;
      } else {
        const b = await baselineRun(docker, env, opts.workDir, opts.labels, `r${i}`);
        baseline.push(b);
        log(
          `snapshot ${i + 1}/${params.runs} baseline: total ${b.totalMs.toFixed(0)} ms, frozen ${b.frozenMs.toFixed(0)} ms ` +
            `(pause ${b.pauseMs.toFixed(0)}, commit ${b.commitMs.toFixed(0)}, tar|zstd ${b.tarMs.toFixed(0)}, unpause ${b.unpauseMs.toFixed(0)})`,
        );
      }
    }
  }
  if (!kept) throw new Error("no snapshot was taken");
  const denvTotalMs = median(denv.map((r) => r.totalMs));
  const baselineTotalMs = median(baseline.map((r) => r.totalMs));
  return {
    params,
    setup: opts.setup,
    denv,
    baseline,
    ...(warmup ? { warmup } : {}),
    medians: {
      denvTotalMs,
      denvFrozenMs: median(denv.map((r) => r.frozenMs)),
      denvWallMs: median(denv.map((r) => r.wallMs)),
      baselineTotalMs,
      baselineFrozenMs: median(baseline.map((r) => r.frozenMs)),
      speedup: baselineTotalMs / denvTotalMs,
    },
    keptVersion: kept.id,
  };
}
