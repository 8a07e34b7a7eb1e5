import { randomBytes } from "node:crypto";
import { mkdir, readFile, rm } from "node:fs/promises";
import { cpus, release, totalmem } from "node:os";
import { dirname, join, resolve } from "node:path";
import { performance } from "node:perf_hooks";
import { fileURLToPath } from "node:url";
import { Runtime } from "@denv/denvd";
import Docker from "dockerode";
import type { Stack } from "../../../packages/cli/dist/e2e/stack.js";
import { CP_NODE_OPTIONS } from "../../../packages/cli/dist/local-stack.js";
import { readArgs } from "../../runtime/dist/args.js";
import { sweep, teardownHost, teardownRuntime } from "../../runtime/dist/cleanup.js";
import { log, run } from "../../runtime/dist/host.js";
import { newTempDir, smallStack } from "../../runtime/dist/stacks.js";
import {
  printFooter,
  type Row,
  ratioOf,
  round,
  table,
  verdict,
  writeResults,
} from "../../runtime/dist/stats.js";
import { bareNodeRss } from "./cp-process.js";
import { type BenchStack, ENV, startBenchStack } from "./denv-stack.js";
import { type ExecResult, execBench } from "./exec-bench.js";
import { type ForkResult, forkBench } from "./fork-bench.js";
import { HEALTHZ, type LoadResult, loadBench, ROUTES } from "./load-bench.js";
import { STORES, type StoreKind } from "./load-database.js";
import { MiB } from "./numbers.js";

const USAGE = `usage: node bench/api/run.mjs [--smoke] [--only exec,fork,load] [--hosts 100,1000]
                              [--envs-per-host N] [--store sqlite,postgres] [--postgres-url URL]
                              [--cpu-prof DIR] [--cp-node-options OPTS] [--exec-pairs N]
                              [--fork-runs N] [--requests N]
                              [--healthz N] [--concurrency N] [--workers N]

  --smoke            5 exec rounds, 1 fork pair, 10 hosts, 200 + 100 requests (about 1 minute)
  --only LIST        run only these benchmarks
  --hosts LIST       simulated host counts of the load benchmark (default 100,1000; smoke 10)
  --envs-per-host N  environments per simulated host (default 10)
  --store LIST       the control plane's store in the load benchmark, one run per store and host
                     count: sqlite (default), postgres (a throwaway local cluster per run)
  --postgres-url URL create each postgres run's database on this server instead (dropped after)
  --cpu-prof DIR     profile the load benchmark's control plane (node --cpu-prof) into DIR
  --cp-node-options OPTS  node options for that control plane, space-separated (default: those
                     denv up starts it with, the CLI's CP_NODE_OPTIONS; "" for none)
  --exec-pairs N     exec rounds (SDK, docker exec CLI, Engine API each; default 30)
  --fork-runs N      fork pairs, API and runtime (default 10)
  --requests N       measured requests of the read mix per host count (default 2000)
  --healthz N        measured GET /healthz requests per host count (default 1000)
  --concurrency N    requests in flight (default 16)
  --workers N        load generator processes (default 4)
  Needs root (denvd's volume store mounts a btrfs loop file) and a running Docker engine.`;

const ALL = ["exec", "fork", "load"] as const;
type Section = (typeof ALL)[number];

interface Config {
  smoke: boolean;
  only: Set<Section>;
  hosts: number[];
  envsPerHost: number;
  stores: StoreKind[];
  postgresUrl: string | undefined;
  cpuProfDir: string | undefined;
  cpNodeOptions: string[];
  execPairs: number;
  execWarmup: number;
  forkRuns: number;
  forkWarmup: number;
  requests: number;
  healthz: number;
  concurrency: number;
  workers: number;
  rounds: number;
  isolated: number;
}

function parseArgs(argv: string[]): Config {
  const smoke = argv.includes("--smoke");
  const c: Config = smoke
    ? {
        smoke,
        only: new Set(ALL),
        hosts: [10],
        envsPerHost: 10,
        stores: ["sqlite"],
        postgresUrl: undefined,
        cpuProfDir: undefined,
        cpNodeOptions: [...CP_NODE_OPTIONS],
        execPairs: 5,
        execWarmup: 1,
        forkRuns: 1,
        forkWarmup: 0,
        requests: 200,
        healthz: 100,
        concurrency: 16,
        workers: 1,
        rounds: 2,
        isolated: 10,
      }
    : {
        smoke,
        only: new Set(ALL),
        hosts: [100, 1000],
        envsPerHost: 10,
        stores: ["sqlite"],
        postgresUrl: undefined,
        cpuProfDir: undefined,
        cpNodeOptions: [...CP_NODE_OPTIONS],
        execPairs: 30,
        execWarmup: 3,
        forkRuns: 10,
        forkWarmup: 1,
        requests: 2000,
        healthz: 1000,
        concurrency: 16,
        workers: 4,
        rounds: 4,
        isolated: 50,
      };
  readArgs(argv, USAGE, (arg, r) => {
    if (arg === "--smoke") return true;
    if (arg === "--only") c.only = new Set(r.oneOf(ALL, "benchmark"));
    else if (arg === "--hosts") c.hosts = r.value().split(",").map(positive(arg));
    else if (arg === "--envs-per-host") c.envsPerHost = r.count();
    else if (arg === "--store") c.stores = r.oneOf(STORES, "store");
    else if (arg === "--postgres-url") c.postgresUrl = r.value();
    else if (arg === "--cpu-prof") c.cpuProfDir = resolve(r.value());
    else if (arg === "--cp-node-options") c.cpNodeOptions = r.value().split(" ").filter(Boolean);
    else if (arg === "--exec-pairs") c.execPairs = r.count();
    else if (arg === "--fork-runs") c.forkRuns = r.count();
    else if (arg === "--requests") c.requests = r.count();
    else if (arg === "--healthz") c.healthz = r.count();
    else if (arg === "--concurrency") c.concurrency = r.count();
    else if (arg === "--workers") c.workers = r.count();
    else return false;
    return true;
  });
  return c;
}

/** A list element that must be a positive integer. */
function positive(flag: string): (v: string) => number {
  return (v) => {
    const n = Number(v);
    if (!Number.isInteger(n) || n < 1) throw new Error(`${flag} needs positive integers`);
    return n;
  };
}

const GiB = 1024 ** 3;
/** The load benchmark's targets, by host count (10 environments per host): read-mix p99 and cp RSS. */
const LOAD_TARGETS: Record<number, { p99Ms: number; rssMb: number }> = {
  1000: { p99Ms: 50, rssMb: 200 },
  10000: { p99Ms: 100, rssMb: 400 },
};

interface Results {
  exec?: ExecResult;
  fork?: ForkResult;
  load: LoadResult[];
  /** VmRSS of a bare `node -e setInterval(...)`, for context. */
  bareNodeRssMb?: number;
  stack?: { url: string; hostId: string; deployMs: number };
}

async function main(): Promise<number> {
  const cfg = parseArgs(process.argv.slice(2));
  const has = (s: Section) => cfg.only.has(s);
  const needDocker = has("exec") || has("fork");
  const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
  const runId = randomBytes(3).toString("hex");
  const rtHostId = `benchapi${runId}`;
  const rtStateDir = join("/var/lib/denvd-bench", rtHostId);
  const docker = new Docker({ socketPath: "/var/run/docker.sock" });
  const startedAt = new Date();
  const t0 = performance.now();

  if (needDocker) {
    if (process.getuid?.() !== 0)
      throw new Error("run as root: denvd's volume store mounts a btrfs loop file");
    await docker.ping().catch(() => {
      throw new Error("the Docker engine does not answer: start it with scripts/setup-host");
    });
  }

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

  const machine = {
    cpus: cpus().length,
    memGiB: round(totalmem() / GiB, 1),
    kernel: release(),
    node: process.version,
    docker: needDocker ? (await docker.version()).Version : undefined,
  };
  log(`run ${runId} (${cfg.smoke ? "smoke" : "full"}), ${machine.cpus} CPUs, node ${machine.node}`);

  let stack: Stack | undefined;
  let bench: BenchStack | undefined;
  const others = async (): Promise<string[]> =>
    needDocker
      ? (await docker.listContainers())
          .filter((c) => {
            const host = c.Labels?.["ai.denv.host"] ?? "";
            return host !== rtHostId && (bench === undefined || host !== bench.hostId);
          })
          .map((c) => (c.Names[0] ?? c.Id).replace(/^\//, ""))
      : [];
  const concurrent = { atStart: await others(), atEnd: [] as string[] };
  if (concurrent.atStart.length > 0) {
    log(
      `WARNING: ${concurrent.atStart.length} other containers run on this engine: ${concurrent.atStart.join(", ")}`,
    );
  }

  const tmp = await newTempDir();
  const results: Results = { load: [] };
  const problems: string[] = [];
  let failure: Error | undefined;
  let rt: Runtime | undefined;
  let stackHostId: string | undefined;

  const closeStack = async () => {
    const s = stack;
    if (!s) return;
    stack = undefined;
    try {
      stackHostId ??= s.hostId();
    } catch {
      // denvd never wrote its host id: nothing of it can be in Docker.
    }
    if (bench) {
      await bench.client
        .destroy(ENV, { wait: true })
        .catch((err: Error) => problems.push(`destroy ${ENV}: ${err.message}`));
    }
    await s.close().catch((err: Error) => problems.push(`stack close: ${err.message}`));
  };

  try {
    const smallDir = await smallStack(tmp);
    if (needDocker) {
      log("starting a denv (denv up: control plane + denvd) and deploying the small stack as bench/alpha");
      const stackTmp = join(tmp, "stack");
      await mkdir(stackTmp);
      bench = await startBenchStack(smallDir, stackTmp, (s) => {
        stack = s;
      });
      stackHostId = bench.hostId;
      results.stack = { url: bench.stack.url, hostId: bench.hostId, deployMs: bench.deployMs };
      log(`${ENV} ready on ${bench.hostId} in ${bench.deployMs.toFixed(0)} ms`);
      if (has("exec")) {
        check();
        results.exec = await execBench(bench.client, docker, {
          env: ENV,
          containerId: bench.containerId,
          agent: bench.agent,
          pairs: cfg.execPairs,
          warmup: cfg.execWarmup,
          check,
          log,
        });
      }
      if (has("fork")) {
        check();
        rt = await Runtime.open({ hostId: rtHostId, stateDir: rtStateDir });
        const rtEnv = await rt.deploy({ project: "bench", projectDir: smallDir });
        const rtVersion = await rt.snapshot(rtEnv.id);
        const snap = await bench.client.snapshot(ENV, { wait: true });
        if (snap.status !== "succeeded") throw new Error(`snapshot of ${ENV}: ${snap.error?.message ?? ""}`);
        const apiVersion = (snap.result as { id: string }).id;
        log(`forking ${apiVersion} (API) and ${rtVersion.id} on runtime ${rtHostId}`);
        results.fork = await forkBench(bench.client, rt, {
          apiEnv: ENV,
          apiVersion,
          runtimeVersion: rtVersion.id,
          runs: cfg.forkRuns,
          warmup: cfg.forkWarmup,
          check,
          log,
        });
        problems.push(...(await teardownRuntime(rt, rtStateDir)));
        rt = undefined;
      }
      log("taking the denv down before the load benchmark");
      await closeStack();
    }
    if (has("load")) {
      results.bareNodeRssMb = (await bareNodeRss()) / MiB;
      if (cfg.cpuProfDir) await mkdir(cfg.cpuProfDir, { recursive: true });
      for (const store of cfg.stores) {
        for (const n of cfg.hosts) {
          check();
          results.load.push(
            await loadBench({
              repoRoot,
              hosts: n,
              envsPerHost: cfg.envsPerHost,
              store,
              postgresUrl: cfg.postgresUrl,
              cpuProfDir: cfg.cpuProfDir,
              cpNodeOptions: cfg.cpNodeOptions,
              runId,
              workers: cfg.workers,
              requests: cfg.requests,
              healthz: cfg.healthz,
              concurrency: cfg.concurrency,
              rounds: cfg.rounds,
              isolated: cfg.isolated,
              log,
              check,
            }),
          );
        }
      }
    }
  } catch (err) {
    failure = err as Error;
    log(`FAILED: ${failure.stack ?? failure.message}`);
  } finally {
    log("cleaning up");
    await closeStack();
    if (rt) problems.push(...(await teardownRuntime(rt, rtStateDir)));
    else if (needDocker) problems.push(...(await teardownHost(rtHostId, rtStateDir)));
    if (needDocker) {
      const hosts = [rtHostId, ...(stackHostId ? [stackHostId] : [])];
      const swept = await sweep(docker, hosts, runId).catch((err: Error) => [`sweep failed: ${err.message}`]);
      if (swept.length > 0) problems.push(`left behind and swept: ${swept.join(", ")}`);
    }
    problems.push(...(await removeTree(tmp)));
  }

  concurrent.atEnd = await others().catch(() => []);
  const rows = summaryRows(results);
  const out = {
    runId,
    mode: cfg.smoke ? "smoke" : "full",
    startedAt: startedAt.toISOString(),
    finishedAt: new Date().toISOString(),
    durationMs: Math.round(performance.now() - t0),
    machine,
    concurrentContainers: concurrent,
    config: { ...cfg, only: [...cfg.only] },
    summary: rows,
    results,
    cleanupProblems: problems,
    ...(failure ? { error: failure.message } : {}),
  };
  const file = await writeResults(repoRoot, "api", startedAt, out);

  console.log("");
  console.log(
    `denv API benchmark (${cfg.smoke ? "SMOKE: few samples, 10 hosts; numbers are not meaningful" : "full"}; ` +
      `${machine.cpus} CPUs, node ${machine.node}${machine.docker ? `, docker ${machine.docker}` : ""})`,
  );
  console.log("");
  console.log(table(rows));
  console.log("");
  return printFooter({ file, concurrent, problems, failure });
}

/** Removes a temporary tree; a mount left inside it (a denvd store) is unmounted first. */
async function removeTree(dir: string): Promise<string[]> {
  const problems: string[] = [];
  const mounts = (await readFile("/proc/mounts", "utf8"))
    .split("\n")
    .map((l) => l.split(" ")[1] ?? "")
    .filter((m) => m.startsWith(`${dir}/`))
    .sort((a, b) => b.length - a.length);
  for (const m of mounts) {
    const r = await run("umount", [m]);
    if (r.code !== 0) problems.push(`umount ${m}: ${r.stderr.trim()}`);
    else problems.push(`${m} was still mounted: unmounted`);
  }
  if (problems.some((p) => p.startsWith("umount"))) return [...problems, `${dir} kept: a mount inside it`];
  await rm(dir, { recursive: true, force: true });
  return problems;
}

function summaryRows(r: Results): Row[] {
  const rows: Row[] = [];
  const add = (row: Omit<Row, "ratio">) => {
    const ratio = ratioOf(row);
    rows.push({ ...row, ...(ratio !== undefined ? { ratio: round(ratio, 2) } : {}) });
  };
  const ms = (n: number) => `${n.toFixed(1)} ms`;
  if (r.exec) {
    const e = r.exec;
    add({
      name: "exec `true` round trip: SDK -> cp -> denvd -> container",
      denv: round(e.medians.sdk),
      baseline: round(e.medians.dockerCli),
      baselineName: "`docker exec <container> true` CLI",
      unit: "ms",
      ratioKind: "denv/baseline",
      target: "<= 1.0x",
      verdict: verdict(e.medians.sdk / e.medians.dockerCli <= 1.0),
      note:
        `${e.pairs} interleaved rounds (median); p99 SDK ${ms(e.latency.sdk.p99)}, ` +
        `docker CLI ${ms(e.latency.dockerCli.p99)}`,
    });
    add({
      name: "exec `true`: SDK vs a bare Engine API exec (context)",
      denv: round(e.medians.sdk),
      baseline: round(e.medians.engineApi),
      baselineName: "Engine API exec create+start+inspect",
      unit: "ms",
      ratioKind: "denv/baseline",
      verdict: "info",
      note: `what the whole path adds to the Engine API exec it ends in: ${ms(e.medians.sdk - e.medians.engineApi)}`,
    });
  }
  if (r.fork) {
    const f = r.fork.medians;
    const phases = Object.entries(f.phases)
      .map(([k, v]) => `${k} ${v.toFixed(0)}`)
      .join(", ");
    add({
      name: "fork-to-ready via the API (2x debian sleep + volume)",
      denv: round(f.apiMs),
      baseline: round(f.runtimeMs),
      baselineName: "Runtime.fork, denvd as a library",
      unit: "ms",
      ratioKind: "denv/baseline",
      target: "<= 1.1x",
      verdict: verdict(f.ratio <= 1.1),
      note:
        `${r.fork.runs.length} alternating pairs (median); the API fork's phases (ms): ${phases}; ` +
        `denvd's own fork total ${f.apiHostTotalMs.toFixed(0)} ms (API) vs ${f.runtimeTotalMs.toFixed(0)} ms (runtime alone)`,
    });
  }
  for (const l of r.load) {
    // The targets are for 10 environments per host; other shapes are reported only.
    const target = l.envsPerHost === 10 ? LOAD_TARGETS[l.hosts] : undefined;
    const opts = l.cpNodeOptions.length > 0 ? `, node ${l.cpNodeOptions.join(" ")}` : "";
    const tag = `N=${l.hosts} hosts, ${l.environments} envs, ${l.store}${opts}`;
    const short = `N=${l.hosts}, ${l.store}`;
    const h = l.latency.healthz;
    const p99 = (value: number) =>
      target
        ? { target: `< ${target.p99Ms} ms`, verdict: verdict(value < target.p99Ms) }
        : { verdict: "info" as const };
    const rss = (value: number) =>
      target
        ? { target: `< ${target.rssMb} MB`, verdict: verdict(value < target.rssMb) }
        : { verdict: "info" as const };
    add({
      name: `cp read mix p50 (${tag})`,
      denv: round(l.latency.mix.p50),
      baseline: round(h.p50),
      baselineName: "GET /healthz p50",
      unit: "ms",
      ratioKind: "denv/baseline",
      verdict: "info",
      note:
        `${l.requests.mix} requests of ${ROUTES.length} read routes in turn + ${l.requests.healthz} healthz, ` +
        `healthz alone p50 ${ms(l.isolated[HEALTHZ].p50)}; ` +
        `${l.requests.concurrency} in flight, ${l.requests.errors} errors; machine load average ` +
        `${l.loadAverage.before.toFixed(1)} -> ${l.loadAverage.after.toFixed(1)}; ${l.database}; setup: ${l.deployments} deployments, ` +
        `deploy median ${l.setupMs.deployMedian.toFixed(0)} ms, forks ${(l.setupMs.forks / 1000).toFixed(0)} s`,
    });
    add({
      name: `cp read mix p99 (${tag})`,
      denv: round(l.latency.mix.p99),
      baseline: round(h.p99),
      baselineName: "GET /healthz p99",
      unit: "ms",
      ratioKind: "denv/baseline",
      ...p99(l.latency.mix.p99),
    });
    for (const route of ROUTES) {
      const x = l.latency.routes[route];
      add({
        name: `  ${route} p99 (${short})`,
        denv: round(x.p99),
        baseline: round(h.p99),
        baselineName: "GET /healthz p99",
        unit: "ms",
        ratioKind: "denv/baseline",
        ...p99(x.p99),
        note: `in the mix p50 ${ms(x.p50)} (${x.n} requests); alone (1 in flight) p50 ${ms(l.isolated[route].p50)}, p99 ${ms(l.isolated[route].p99)}`,
      });
    }
    add({
      name: `cp RSS (${tag})`,
      denv: round(l.memory.loadedRssMb),
      baseline: round(l.memory.emptyRssMb),
      baselineName: "the same cp before any host joined",
      unit: "MB",
      ratioKind: "denv/baseline",
      ...rss(l.memory.loadedRssMb),
      note:
        `after setup and the reads; peak (VmHWM) ${l.memory.peakRssMb.toFixed(0)} MB; ` +
        `its memoryUsage() then (MB): ${Object.entries(l.memory.loadedHeap)
          .map(([k, v]) => `${k} ${v}`)
          .join(", ")}; ` +
        `${l.online.afterLoad}/${l.hosts} hosts online at the end` +
        (r.bareNodeRssMb ? `; a bare node process: ${r.bareNodeRssMb.toFixed(0)} MB` : "") +
        (l.cpuProfiles.length > 0 ? `; CPU profiles: ${l.cpuProfiles.join(", ")}` : ""),
    });
    add({
      name: `cp RSS settled (${short})`,
      denv: round(l.memory.settledRssMb),
      baseline: round(l.memory.emptyRssMb),
      baselineName: "the same cp before any host joined",
      unit: "MB",
      ratioKind: "denv/baseline",
      ...rss(l.memory.settledRssMb),
      note:
        `the same process ${(l.memory.settledAfterMs / 1000).toFixed(0)} s later, its RSS no longer falling ` +
        "(V8 gives back the heap the setup's burst grew to only once a full GC arms its memory reducer); " +
        "the hosts still connected and beating",
    });
    add({
      name: `cp RSS restarted on the same state (${short})`,
      denv: round(l.memory.restartedRssMb),
      baseline: round(l.memory.emptyRssMb),
      baselineName: "the same cp before any host joined",
      unit: "MB",
      ratioKind: "denv/baseline",
      ...rss(l.memory.restartedRssMb),
      note:
        `a new cp process on the data dir: ${l.memory.restartedIdleRssMb.toFixed(0)} MB once all ${l.hosts} hosts ` +
        `were back (${l.memory.restartedOnlineMs.toFixed(0)} ms), this after ${l.memory.restartedReads} reads of the mix`,
    });
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
