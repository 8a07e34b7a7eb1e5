import { randomBytes } from "node:crypto";
import { rm } from "node:fs/promises";
import { cpus, release, totalmem } from "node:os";
import { dirname, join, resolve } from "node:path";
import { performance } from "node:perf_hooks";
import { fileURLToPath } from "node:url";
import { Runtime } from "@denv/denvd";
import Docker from "dockerode";
import { readArgs } from "./args.js";
import { probeLabels, sweep, teardownHost, teardownRuntime } from "./cleanup.js";
import { type ExecResult, execBench } from "./exec-bench.js";
import { type FloorMode, type ForkResult, forkBench } from "./fork-bench.js";
import { log, run } from "./host.js";
import { type MemoryResult, memoryBench } from "./memory-bench.js";
import {
  describeEnv,
  prepareData,
  type SnapshotParams,
  type SnapshotResult,
  snapshotBench,
  stopWriter,
} from "./snapshot-bench.js";
import { newTempDir, quickstartWithBulk, smallStack } from "./stacks.js";
import { printFooter, type Row, ratioOf, round, table, verdict, writeResults } from "./stats.js";

const USAGE = `usage: node bench/runtime/run.mjs [--smoke] [--runs N] [--exec-iterations N]
                                  [--only snapshot,fork,exec,memory]

  --smoke                1 run of each, 10 MB / 100 files, 5 execs, 2 held environments (< 1 min
                         once the quickstart images are built)
  --runs N               runs of the snapshot and fork benchmarks and idle-memory samples (default 5)
  --exec-iterations N    exec pairs (default 100; 5 with --smoke)
  --only LIST            run only these benchmarks
  Needs root (the volume store mounts a btrfs loop file) and a running Docker engine.`;

const ALL = ["snapshot", "fork", "exec", "memory"] as const;
type Section = (typeof ALL)[number];

interface Args {
  smoke: boolean;
  runs: number;
  execIterations: number;
  only: Set<Section>;
}

function parseArgs(argv: string[]): Args {
  const a: Args = { smoke: false, runs: 0, execIterations: 0, only: new Set(ALL) };
  readArgs(argv, USAGE, (arg, r) => {
    if (arg === "--smoke") a.smoke = true;
    else if (arg === "--runs") a.runs = r.count();
    else if (arg === "--exec-iterations") a.execIterations = r.count();
    else if (arg === "--only") a.only = new Set(r.oneOf(ALL, "benchmark"));
    else return false;
    return true;
  });
  return a;
}

const GiB = 1024 ** 3;
const MiB = 1024 ** 2;

async function main(): Promise<number> {
  const args = parseArgs(process.argv.slice(2));
  const cfg = args.smoke
    ? {
        runs: 1,
        files: 100,
        totalBytes: 10 * MiB,
        execIterations: 5,
        warmup: 1,
        hold: 2,
        startupMs: 500,
        idleMs: 3000,
      }
    : {
        runs: 5,
        files: 10_000,
        totalBytes: GiB,
        execIterations: 100,
        warmup: 5,
        hold: 10,
        startupMs: 1500,
        idleMs: 15_000,
      };
  if (args.runs) cfg.runs = args.runs;
  if (args.execIterations) cfg.execIterations = args.execIterations;
  const has = (s: Section) => args.only.has(s);

  const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
  const runId = randomBytes(3).toString("hex");
  const hostId = `bench${runId}`;
  const memHostId = `${hostId}-m`;
  const stateRoot = "/var/lib/denvd-bench";
  const stateDir = join(stateRoot, hostId);
  const memStateDir = join(stateRoot, memHostId);
  const labels = probeLabels(runId);
  const docker = new Docker({ socketPath: "/var/run/docker.sock" });
  const startedAt = new Date();
  const t0 = performance.now();

  if (process.getuid?.() !== 0) throw new Error("run as root: the volume store mounts a btrfs loop file");
  await docker.ping().catch(() => {
    throw new Error("the Docker engine does not answer: start it with scripts/setup-host");
  });
  if ((await run("zstd", ["--version"])).code !== 0) throw new Error("zstd is missing on the host");

  let aborted = false;
  const check = () => {
    if (aborted) throw new Error("interrupted");
  };
  let signals = 0;
  for (const sig of ["SIGINT", "SIGTERM"] as const) {
    process.on(sig, () => {
      signals++;
      aborted = true;
      log(signals === 1 ? `${sig}: stopping after the current step, then cleaning up` : `${sig}: again`);
    });
  }

  const info = await docker.info();
  const version = await docker.version();
  const machine = {
    cpus: cpus().length,
    memGiB: round(totalmem() / GiB, 1),
    kernel: release(),
    node: process.version,
    docker: version.Version,
    storageDriver: info.Driver,
    cgroupVersion: info.CgroupVersion,
  };
  log(
    `run ${runId} (${args.smoke ? "smoke" : "full"}), host id ${hostId}, ${machine.cpus} CPUs, ` +
      `docker ${machine.docker} ${machine.storageDriver}`,
  );

  // Other containers running on this engine compete for the same 2 cores: worth knowing.
  const others = async (): Promise<string[]> =>
    (await docker.listContainers())
      .filter(
        (c) =>
          ![hostId, memHostId].includes(c.Labels?.["ai.denv.host"] ?? "") &&
          c.Labels?.["ai.denv.bench.run"] !== runId,
      )
      .map((c) => (c.Names[0] ?? c.Id).replace(/^\//, ""));
  const concurrent = { atStart: await others(), atEnd: [] as string[] };
  if (concurrent.atStart.length > 0) {
    log(
      `WARNING: ${concurrent.atStart.length} other containers run on this engine: ${concurrent.atStart.join(", ")}`,
    );
  }

  const tmp = await newTempDir();
  const results: {
    snapshot?: SnapshotResult;
    forkQuickstart?: ForkResult;
    forkSmall?: ForkResult;
    execQuickstart?: ExecResult;
    execSmall?: ExecResult;
    memory?: MemoryResult;
    quickstartDeployMs?: number;
  } = {};
  const problems: string[] = [];
  let failure: Error | undefined;
  let rt: Runtime | undefined;

  try {
    rt = await Runtime.open({ hostId, stateDir });
    log(`volume store: ${rt.host.store.method} at ${rt.host.store.root}`);
    const needQuickstart = has("snapshot") || has("exec") || has("fork");
    if (needQuickstart) {
      const qsDir = await quickstartWithBulk(repoRoot, tmp);
      log("deploying the quickstart (+ bulk volume); builds its images (cached after the first run)");
      const d0 = performance.now();
      const qs = await rt.deploy({ project: "qsbench", projectDir: qsDir });
      results.quickstartDeployMs = performance.now() - d0;
      log(`${qs.id} ready in ${results.quickstartDeployMs.toFixed(0)} ms`);
      const env = await describeEnv(rt, qs.id);

      const params: SnapshotParams = {
        runs: cfg.runs,
        warmup: !args.smoke,
        files: cfg.files,
        totalBytes: cfg.totalBytes,
      };
      log(
        `filling /bulk with ${params.files} files, ${(params.totalBytes / MiB).toFixed(0)} MiB; starting the writer`,
      );
      const fill = await prepareData(rt, env, params);
      log(`filled ${fill.files} files, ${(fill.bytes / MiB).toFixed(0)} MiB in ${fill.fillMs.toFixed(0)} ms`);
      check();
      const setup = { deployMs: results.quickstartDeployMs, ...fill };
      if (has("snapshot") || has("fork")) {
        results.snapshot = await snapshotBench(
          rt,
          docker,
          env,
          has("snapshot") ? params : { ...params, runs: 1 },
          {
            workDir: join(stateDir, "baseline"),
            labels,
            setup,
            check,
          },
        );
      }
      await stopWriter(rt, qs.id);
      if (has("exec")) {
        results.execQuickstart = await execBench(rt, docker, qs.id, {
          iterations: cfg.execIterations,
          warmup: cfg.warmup,
          check,
        });
      }
      if (has("fork") && results.snapshot) {
        results.forkQuickstart = await forkBench(rt, docker, {
          stack: "quickstart",
          versionId: results.snapshot.keptVersion,
          runs: cfg.runs,
          runId,
          labels,
          floors: ["sequential", "health"],
          check,
        });
      }
      await rt.destroy(qs.id);
    }
    if (has("fork") || has("exec")) {
      check();
      const smallDir = await smallStack(tmp);
      const small = await rt.deploy({ project: "small", projectDir: smallDir });
      if (has("exec")) {
        results.execSmall = await execBench(rt, docker, small.id, {
          iterations: cfg.execIterations,
          warmup: cfg.warmup,
          check,
        });
      }
      if (has("fork")) {
        const v = await rt.snapshot(small.id);
        results.forkSmall = await forkBench(rt, docker, {
          stack: "small",
          versionId: v.id,
          runs: cfg.runs,
          runId,
          labels,
          floors: ["sequential", "concurrent"],
          check,
        });
      }
      await rt.destroy(small.id);
    }
    if (has("memory")) {
      check();
      const smallDir = await smallStack(tmp);
      const mem = await memoryBench({
        hostId: memHostId,
        stateDir: memStateDir,
        smallDir,
        idleRuns: cfg.runs,
        hold: cfg.hold,
        startupMs: cfg.startupMs,
        idleMs: cfg.idleMs,
        log,
        check,
      });
      results.memory = mem;
    }
  } catch (err) {
    failure = err as Error;
    log(`FAILED: ${failure.stack ?? failure.message}`);
  } finally {
    log("cleaning up");
    if (rt) problems.push(...(await teardownRuntime(rt, stateDir)));
    else problems.push(...(await teardownHost(hostId, stateDir)));
    problems.push(...(await teardownHost(memHostId, memStateDir)));
    const swept = await sweep(docker, [hostId, memHostId], runId).catch((err: Error) => [
      `sweep failed: ${err.message}`,
    ]);
    if (swept.length > 0) problems.push(`left behind and swept: ${swept.join(", ")}`);
    await rm(tmp, { recursive: true, force: true });
  }

  concurrent.atEnd = await others().catch(() => []);
  const rows = summaryRows(results, cfg.hold);
  const finishedAt = new Date();
  const out = {
    runId,
    hostId,
    mode: args.smoke ? "smoke" : "full",
    startedAt: startedAt.toISOString(),
    finishedAt: finishedAt.toISOString(),
    durationMs: Math.round(performance.now() - t0),
    machine,
    concurrentContainers: concurrent,
    config: cfg,
    summary: rows,
    results,
    cleanupProblems: problems,
    ...(failure ? { error: failure.message } : {}),
  };
  const file = await writeResults(repoRoot, "runtime", startedAt, out);

  console.log("");
  console.log(
    `denv runtime benchmark (${args.smoke ? "SMOKE: 1 run, small data; numbers are not meaningful" : `medians of ${cfg.runs} runs`}; ` +
      `${machine.cpus} CPUs, docker ${machine.docker}, ${machine.storageDriver}, cgroup v${machine.cgroupVersion})`,
  );
  console.log("");
  console.log(table(rows));
  console.log("");
  return printFooter({ file, concurrent, problems, failure });
}

function summaryRows(
  r: {
    snapshot?: SnapshotResult;
    forkQuickstart?: ForkResult;
    forkSmall?: ForkResult;
    execQuickstart?: ExecResult;
    execSmall?: ExecResult;
    memory?: MemoryResult;
  },
  hold: number,
): Row[] {
  const rows: Row[] = [];
  const add = (row: Omit<Row, "ratio">) => {
    const ratio = ratioOf(row);
    rows.push({ ...row, ...(ratio !== undefined ? { ratio: round(ratio, 2) } : {}) });
  };
  const s = r.snapshot;
  if (s && s.denv.length > 0) {
    const data = `${s.setup.files} files, ${(s.setup.bytes / MiB).toFixed(0)} MiB`;
    const m = s.medians;
    const base = "pause+commit+tar|zstd -1+unpause";
    add({
      name: `snapshot total (quickstart, ${data}, writer on)`,
      denv: round(m.denvTotalMs),
      baseline: round(m.baselineTotalMs),
      baselineName: base,
      unit: "ms",
      ratioKind: "baseline/denv",
      target: "<= 600 ms",
      verdict: verdict(m.denvTotalMs <= 600),
    });
    add({
      name: "snapshot frozen window",
      denv: round(m.denvFrozenMs),
      baseline: round(m.baselineFrozenMs),
      baselineName: "paused until unpause",
      unit: "ms",
      ratioKind: "baseline/denv",
      target: "<= 400 ms",
      verdict: verdict(m.denvFrozenMs <= 400),
    });
    add({
      name: "snapshot speedup vs baseline",
      denv: round(m.denvTotalMs),
      baseline: round(m.baselineTotalMs),
      baselineName: base,
      unit: "ms",
      ratioKind: "baseline/denv",
      target: ">= 5x faster",
      verdict: verdict(m.speedup >= 5),
    });
  }
  for (const f of [r.forkQuickstart, r.forkSmall]) {
    if (!f) continue;
    const quick = f.stack === "quickstart";
    const m = f.medians;
    const floorMs = (mode: FloorMode) => m.floorMs[mode] ?? Number.NaN;
    const parts =
      `create ${m.createMs.toFixed(0)} ms (network ${m.networkMs.toFixed(0)}, firewall ${m.firewallMs.toFixed(0)}, ` +
      `volumes ${m.volumesMs.toFixed(0)}, containers ${m.containersMs.toFixed(0)}; overlapping), start ${m.startMs.toFixed(0)} ms, ` +
      `health ${m.healthMs.toFixed(0)} ms, baseline ${m.baselineMs.toFixed(0)} ms, probe ${m.probeMs.toFixed(0)} ms (fork evidence medians)`;
    add({
      name: quick
        ? "fork-to-ready, quickstart (1 s healthchecks)"
        : "fork-to-ready, 2x debian sleep + volume (no healthchecks)",
      denv: round(m.denvMs),
      baseline: round(floorMs("sequential")),
      baselineName: "floor: create+start via Engine API",
      unit: "ms",
      ratioKind: "denv/baseline",
      target: "<= 1.2x",
      verdict: verdict(floorMs("sequential") > 0 && m.denvMs / floorMs("sequential") <= 1.2),
      note: quick
        ? `denv waits for both healthchecks (db before app: app depends on db being healthy), the floor waits for nothing; ${parts}`
        : `denv's own overhead over container starts: ${parts}`,
    });
    if (f.floors.includes("health")) {
      add({
        name: "  quickstart vs a floor that waits for health as the file says",
        denv: round(m.denvMs),
        baseline: round(floorMs("health")),
        baselineName: "floor: start db, exec its check until it passes, start app, exec app's",
        unit: "ms",
        ratioKind: "denv/baseline",
        verdict: "info",
        note: "the same depends_on order and healthchecks, polled every 50 ms through the Engine API: what denv adds is its network, firewall rule, volume clones, route removal, baseline and probe",
      });
    }
    if (f.floors.includes("concurrent")) {
      add({
        name: "  small stack vs a floor that starts both at once",
        denv: round(m.denvMs),
        baseline: round(floorMs("concurrent")),
        baselineName: "floor: create+start both at once via Engine API",
        unit: "ms",
        ratioKind: "denv/baseline",
        verdict: "info",
      });
    }
  }
  for (const [e, quick] of [
    [r.execQuickstart, true],
    [r.execSmall, false],
  ] as const) {
    if (!e) continue;
    add({
      name: quick
        ? "exec `true`, quickstart app (healthchecks running)"
        : "exec `true`, small stack main (quiet container)",
      denv: round(e.medians.denvMs, 1),
      baseline: round(e.medians.rawMs, 1),
      baselineName: "Engine API exec create+start+inspect",
      unit: "ms",
      ratioKind: "denv/baseline",
      target: "<= 1.1x",
      verdict: verdict(e.medians.ratio <= 1.1),
      note: `${e.iterations} interleaved pairs; p25 denv ${e.p25.denvMs.toFixed(1)} ms vs raw ${e.p25.rawMs.toFixed(1)} ms`,
    });
  }
  if (r.memory) {
    const mem = r.memory;
    const m = mem.medians;
    const s = (ms: number) => `${ms / 1000} s`;
    const options = mem.nodeOptions.length > 0 ? mem.nodeOptions.join(" ") : "no node options";
    const floor = "bare node holding a WebSocket";
    add({
      name: `denvd RSS, idle (${s(mem.idleMs)} after hello)`,
      denv: round(m.denvdIdleMb),
      baseline: round(m.baselineIdleMb),
      baselineName: floor,
      unit: "MB",
      ratioKind: "denv/baseline",
      target: "<= 60 MB",
      verdict: verdict(m.denvdIdleMb <= 60),
      note:
        `denvd run as deploy/denvd.service starts it (${options}), the baseline started with it and with ` +
        `the same options; peak (VmHWM) ${round(m.denvdIdleHwmMb)} MB`,
    });
    add({
      name: `denvd RSS, start-up (${s(mem.startupMs)} after hello)`,
      denv: round(m.denvdStartupMb),
      baseline: round(m.baselineStartupMb),
      baselineName: floor,
      unit: "MB",
      ratioKind: "denv/baseline",
      verdict: "info",
      note: "before V8 gives back what the start-up used",
    });
    if (mem.holding) {
      add({
        name: `denvd RSS, holding ${mem.held || hold} environments (small stack, ${s(mem.idleMs)} after)`,
        denv: round(m.holdingMb),
        baseline: round(m.denvdIdleMb),
        baselineName: "the idle denvd",
        unit: "MB",
        ratioKind: "denv/baseline",
        target: "<= 90 MB",
        verdict: verdict(m.holdingMb <= 90),
        note: `${round(m.holdingStartupMb)} MB ${s(mem.startupMs)} after the last fork; peak ${round(m.holdingHwmMb)} MB`,
      });
    }
  }
  return rows;
}

main().then(
  (code) => process.exit(code),
  (err: Error) => {
    console.error(`bench: ${err.message}`);
    process.exit(2);
  },
);
