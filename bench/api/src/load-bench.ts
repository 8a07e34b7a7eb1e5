import { type ChildProcess, fork } from "node:child_process";
import { readdir } from "node:fs/promises";
import { loadavg } from "node:os";
import { dirname, join } from "node:path";
import { performance } from "node:perf_hooks";
import { fileURLToPath } from "node:url";
import { sleep } from "../../runtime/dist/host.js";
import { median } from "../../runtime/dist/stats.js";
import { type CpProcess, startCp } from "./cp-process.js";
import { type LoadDatabase, loadDatabase, type StoreKind } from "./load-database.js";
import type { WorkerReply, WorkerRequest } from "./load-worker.js";
import { type Latency, latency, MiB, pool } from "./numbers.js";

/**
 * Benchmark 3: the control plane (the real denv-cp binary, a child process with a SQLite data
 * dir or a PostgreSQL database) with N simulated hosts speaking the real protocol, each holding
 * E environments (10 by default) that the cp created through its own API. Then read latency
 * under that state, and the cp's memory.
 *
 * Setup, all through public routes (the cp has no way to hold an environment without a
 * deployment, and nothing here writes its store behind its back):
 *   1. a join token with `uses: N`; N fake hosts (packages/cp's FakeHost: the cp's own protocol
 *      client for tests) in a few worker processes join, dial the host stream and say hello;
 *   2. per host one project `load-<i>`: POST /v1/projects, then a deploy of environment e0
 *      (placement picks the online host with the most room, so deploys one after the other give
 *      every host exactly one), a snapshot of e0 (version on that host) and E-1 forks of it
 *      (e1..; placement keeps a fork on a host holding its version): E environments and E+1
 *      deployments per host, every command answered by the fake host;
 *   3. every host reconnects: its hello now lists its environments and its version, and the
 *      cp reconciles them (a host that no longer held one would get it marked failed).
 * Measured: GET /healthz (the baseline) and a mix of read routes, in alternating blocks at a
 * fixed concurrency; the cp's VmRSS before any host joined and after the load.
 */

export const ROUTES = [
  "GET /v1/hosts",
  "GET /v1/projects/:p/environments",
  "GET /v1/environments/:p/:e",
  "GET /v1/deployments/:id",
] as const;
export type RouteName = (typeof ROUTES)[number];
export const HEALTHZ = "GET /healthz";

export interface LoadParams {
  repoRoot: string;
  hosts: number;
  envsPerHost: number;
  store: StoreKind;
  /** An existing PostgreSQL server to create the run's database in (else a throwaway cluster). */
  postgresUrl: string | undefined;
  /** Profile the cp's CPU (node --cpu-prof) into this directory. */
  cpuProfDir: string | undefined;
  /** Node options for the cp (V8 flags), before its main. */
  cpNodeOptions: readonly string[];
  /** Names the run's PostgreSQL database. */
  runId: string;
  workers: number;
  /** Measured requests of the read mix (the routes in turn). */
  requests: number;
  /** Measured GET /healthz requests. */
  healthz: number;
  concurrency: number;
  /** Blocks of healthz and of the mix alternate this many times. */
  rounds: number;
  /** Requests per route sent one at a time (each route's own service time, nothing queued). */
  isolated: number;
  log: (line: string) => void;
  check: () => void;
}

export interface LoadResult {
  hosts: number;
  envsPerHost: number;
  store: StoreKind;
  database: string;
  cpNodeOptions: readonly string[];
  workers: number;
  environments: number;
  deployments: number;
  perHost: { min: number; max: number };
  online: { afterSetup: number; afterLoad: number };
  setupMs: {
    join: number;
    online: number;
    projects: number;
    deploys: number;
    deployMedian: number;
    snapshots: number;
    forks: number;
    reconnect: number;
  };
  requests: { concurrency: number; mix: number; healthz: number; errors: number; errorSamples: string[] };
  /** The machine's 1-minute load average before and after the measured requests (other work on it). */
  loadAverage: { before: number; after: number };
  /**
   * When the measured requests (mix, healthz, each route alone) ran, in µs of the monotonic
   * clock, which the cp's --cpu-prof timestamps use too: cut its profile to this window.
   */
  measuredUs: { from: number; to: number };
  latency: { healthz: Latency; mix: Latency; routes: Record<RouteName, Latency> };
  /** One request at a time, routes in turn: what each request costs the cp on its own. */
  isolated: Record<RouteName | typeof HEALTHZ, Latency>;
  /** Every measured request, in ms. */
  samples: { healthz: number[]; routes: Record<RouteName, number[]> };
  memory: {
    emptyRssMb: number;
    loadedRssMb: number;
    /** The cp's own process.memoryUsage() then (its GET /metrics), in MB: where the RSS is. */
    loadedHeap: Record<string, number>;
    /** The same process once its RSS stopped falling (5 s samples, at most 60 s), and how long that took. */
    settledRssMb: number;
    settledAfterMs: number;
    peakRssMb: number;
    /** A new cp process on the same data dir, once every host reconnected (no request yet). */
    restartedIdleRssMb: number;
    /** The same, after one block (`restartedReads` requests) of the read mix. */
    restartedRssMb: number;
    restartedReads: number;
    restartedOnlineMs: number;
  };
  cpLog: { lines: number; warnings: number; errors: number; sample: string[] };
  /** The CPU profiles the cp processes wrote (--cpu-prof). */
  cpuProfiles: string[];
}

interface Reply {
  status: number;
  ms: number;
  text: string;
}

function client(url: string, token: string) {
  const call = async (method: string, path: string, body?: unknown): Promise<Reply> => {
    const raw = body instanceof Uint8Array;
    const t0 = performance.now();
    const res = await fetch(`${url}${path}`, {
      method,
      headers: {
        authorization: `Bearer ${token}`,
        ...(body === undefined ? {} : { "content-type": raw ? "application/x-tar" : "application/json" }),
      },
      ...(body === undefined ? {} : { body: raw ? body : JSON.stringify(body) }),
    });
    const text = await res.text();
    return { status: res.status, ms: performance.now() - t0, text };
  };
  /** A deployment route with ?wait=true: the finished deployment, which must have succeeded. */
  const deployment = async (method: string, path: string, body?: unknown) => {
    const r = await call(method, `${path}${path.includes("?") ? "&" : "?"}wait=true`, body);
    const d =
      r.status === 200 ? (JSON.parse(r.text) as { id: string; status: string; result?: unknown }) : null;
    if (d?.status !== "succeeded") throw new Error(`${method} ${path}: ${r.status} ${r.text.slice(0, 400)}`);
    return { ...d, ms: r.ms };
  };
  const json = async <T>(path: string): Promise<T> => {
    const r = await call("GET", path);
    if (r.status !== 200) throw new Error(`GET ${path}: ${r.status} ${r.text.slice(0, 400)}`);
    return JSON.parse(r.text) as T;
  };
  return { call, deployment, json };
}

/** RSS every 5 s until it falls by less than 2% (at most 60 s): what the process holds at rest. */
async function settle(cp: CpProcess): Promise<{ rss: number; ms: number }> {
  const t0 = performance.now();
  let last = (await cp.rss(1)).rss;
  while (performance.now() - t0 < 60_000) {
    await sleep(5000);
    const now = (await cp.rss(1)).rss;
    const falling = now < last * 0.98;
    last = now;
    if (!falling) break;
  }
  return { rss: last, ms: performance.now() - t0 };
}

/** CLOCK_MONOTONIC in µs, the clock of V8's CPU profile timestamps in every process. */
function monotonicUs(): number {
  return Number(process.hrtime.bigint() / 1000n);
}

/** process.memoryUsage() of the cp, from its GET /metrics (denv_process_memory_bytes), in MB. */
async function processMemory(api: ReturnType<typeof client>): Promise<Record<string, number>> {
  const text = (await api.call("GET", "/metrics")).text;
  const out: Record<string, number> = {};
  for (const m of text.matchAll(/^denv_process_memory_bytes\{kind="(\w+)"\} (\d+)$/gm)) {
    out[m[1] as string] = Math.round(Number(m[2]) / MiB);
  }
  return out;
}

interface Worker {
  child: ChildProcess;
  ask(req: WorkerRequest): Promise<WorkerReply>;
}

function startWorker(file: string): Worker {
  const child = fork(file, [], { stdio: ["ignore", "inherit", "inherit", "ipc"], execArgv: [] });
  let waiting: { resolve: (r: WorkerReply) => void; reject: (e: Error) => void } | undefined;
  child.on("message", (m: WorkerReply) => {
    const w = waiting;
    waiting = undefined;
    if (m.type === "error") w?.reject(new Error(`load worker: ${m.message}`));
    else w?.resolve(m);
  });
  child.on("exit", (code) => {
    waiting?.reject(new Error(`a load worker exited (${code})`));
    waiting = undefined;
  });
  return {
    child,
    ask: (req) =>
      new Promise<WorkerReply>((resolve, reject) => {
        waiting = { resolve, reject };
        child.send(req);
      }),
  };
}

async function stopWorkers(workers: Worker[]): Promise<void> {
  await Promise.all(
    workers.map(async (w) => {
      if (w.child.exitCode !== null || w.child.signalCode !== null) return;
      const exited = new Promise((r) => w.child.once("exit", r));
      await Promise.race([w.ask({ type: "stop" }).catch(() => undefined), sleep(10_000)]);
      const killer = setTimeout(() => w.child.kill("SIGKILL"), 5_000);
      await exited;
      clearTimeout(killer);
    }),
  );
}

interface HostsPage {
  hosts: Array<{ id: string; status: string; environments: number }>;
  next?: string;
}

export async function loadBench(p: LoadParams): Promise<LoadResult> {
  const n = p.hosts;
  const E = p.envsPerHost;
  const here = dirname(fileURLToPath(import.meta.url));
  let cp: CpProcess | undefined;
  let db: LoadDatabase | undefined;
  const workers: Worker[] = [];
  const profiles: string[] = [];
  const before = new Set(p.cpuProfDir ? await readdir(p.cpuProfDir).catch(() => []) : []);
  try {
    db = await loadDatabase(p.store, `denv_bench_${p.runId}_${n}`, p.postgresUrl);
    cp = await startCp(p.repoRoot, {
      databaseUrl: db.url,
      cpuProfDir: p.cpuProfDir,
      nodeOptions: p.cpNodeOptions,
    });
    const url = cp.url;
    const api = client(url, cp.adminToken);
    p.log(`cp (pid ${cp.pid}) at ${cp.url} on ${db.describe}; ${n} hosts, ${n * E} environments to create`);
    await sleep(1000);
    const empty = await cp.rss();

    // 1. N hosts join and say hello.
    const jt = await api.call("POST", "/v1/targets/local/join-tokens", { uses: n, ttl_sec: 86_400 });
    if (jt.status !== 201) throw new Error(`join token: ${jt.status} ${jt.text}`);
    const token = (JSON.parse(jt.text) as { token: string }).token;
    const names = Array.from({ length: n }, (_, i) => `load-${i}`);
    const nw = Math.max(1, Math.min(p.workers, n));
    for (let w = 0; w < nw; w++) workers.push(startWorker(join(here, "load-worker.js")));
    const t0 = performance.now();
    await Promise.all(
      workers.map((w, k) =>
        w.ask({
          type: "join",
          url,
          token,
          names: names.filter((_, i) => i % nw === k),
          concurrency: 8,
        }),
      ),
    );
    const joinMs = performance.now() - t0;
    /** Every host, page by page (GET /v1/hosts answers at most 1,000 at a time). */
    const allHosts = async (a = api) => {
      const out: HostsPage["hosts"] = [];
      let after: string | undefined;
      do {
        const page = await a.json<HostsPage>(`/v1/hosts?limit=1000${after ? `&after=${after}` : ""}`);
        out.push(...page.hosts);
        after = page.next;
      } while (after !== undefined);
      return out;
    };
    const onlineCount = async (a = api) => (await allHosts(a)).filter((h) => h.status === "online").length;
    const untilOnline = async (what: string) => {
      // 3 minutes, and 20 ms more per host: 10,000 hellos, each reconciled, take a while.
      const waitMs = 180_000 + 20 * n;
      const deadline = Date.now() + waitMs;
      for (;;) {
        p.check();
        const online = await onlineCount();
        if (online === n) return;
        if (Date.now() > deadline)
          throw new Error(`${what}: ${online} of ${n} hosts online after ${waitMs / 1000} s`);
        await sleep(500);
      }
    };
    await untilOnline("join");
    const onlineMs = performance.now() - t0;
    p.log(`${n} hosts joined in ${joinMs.toFixed(0)} ms, all online after ${onlineMs.toFixed(0)} ms`);

    // 2. Ten environments per host, through the API.
    p.check();
    let t = performance.now();
    await pool(names, 16, async (name) => {
      p.check();
      const r = await api.call("POST", "/v1/projects", { name });
      if (r.status !== 201) throw new Error(`POST /v1/projects ${name}: ${r.status} ${r.text}`);
    });
    const projectsMs = performance.now() - t;
    const deploymentIds: string[] = [];
    const deployMs: number[] = [];
    t = performance.now();
    for (const [i, name] of names.entries()) {
      p.check();
      // One at a time: placement then sees the previous one and picks an empty host.
      const d = await api.deployment(
        "POST",
        `/v1/projects/${name}/deploy?environment=e0`,
        Buffer.from("bench: opaque source bytes; the fake host only counts them"),
      );
      deploymentIds.push(d.id);
      deployMs.push(d.ms);
      if ((i + 1) % 200 === 0) p.log(`  deployed ${i + 1}/${n} (last ${d.ms.toFixed(0)} ms)`);
    }
    const deploysMs = performance.now() - t;
    t = performance.now();
    const versions = await pool(names, 16, async (name) => {
      p.check();
      const d = await api.deployment("POST", `/v1/environments/${name}/e0/snapshot`);
      deploymentIds.push(d.id);
      return (d.result as { id: string }).id;
    });
    const snapshotsMs = performance.now() - t;
    t = performance.now();
    const forks = names.flatMap((name, i) =>
      Array.from({ length: E - 1 }, (_, k) => ({
        name,
        version: versions[i] as string,
        env: `e${k + 1}`,
      })),
    );
    await pool(forks, 16, async (f, i) => {
      p.check();
      const d = await api.deployment("POST", `/v1/environments/${f.name}/e0/fork`, {
        version: f.version,
        name: f.env,
      });
      deploymentIds.push(d.id);
      if ((i + 1) % 2000 === 0) p.log(`  forked ${i + 1}/${forks.length}`);
    });
    const forksMs = performance.now() - t;
    p.log(
      `created ${n * E} environments: deploys ${deploysMs.toFixed(0)} ms (median ${median(deployMs).toFixed(1)} ms each), ` +
        `snapshots ${snapshotsMs.toFixed(0)} ms, forks ${forksMs.toFixed(0)} ms`,
    );

    // 3. Every host says hello again, now with what it holds.
    p.check();
    t = performance.now();
    const held = await Promise.all(workers.map((w) => w.ask({ type: "reconnect", concurrency: 8 })));
    await untilOnline("reconnect");
    const reconnectMs = performance.now() - t;
    const heldEnvs = held.reduce((s, r) => s + (r.type === "reconnected" ? r.environments : 0), 0);
    const everyHost = await allHosts();
    const counts = everyHost.map((h) => h.environments);
    const perHost = { min: Math.min(...counts), max: Math.max(...counts) };
    const environments = counts.reduce((a, b) => a + b, 0);
    const afterSetup = everyHost.filter((h) => h.status === "online").length;
    p.log(
      `all ${n} hosts reconnected (hello with ${heldEnvs} environments) in ${reconnectMs.toFixed(0)} ms; ` +
        `the cp counts ${environments} environments, ${perHost.min}..${perHost.max} per host`,
    );
    if (heldEnvs !== n * E || environments !== n * E) {
      throw new Error(
        `expected ${n * E} environments, hosts hold ${heldEnvs}, the cp counts ${environments}`,
      );
    }

    // 4. Latency: healthz and the read mix in alternating blocks at the same concurrency.
    const samples: LoadResult["samples"] = {
      healthz: [],
      routes: Object.fromEntries(ROUTES.map((r) => [r, []])) as unknown as Record<RouteName, number[]>,
    };
    const errorSamples: string[] = [];
    let errors = 0;
    const pick = <T>(xs: readonly T[]): T => xs[Math.floor(Math.random() * xs.length)] as T;
    const pathOf = (route: RouteName | typeof HEALTHZ): string => {
      const project = pick(names);
      switch (route) {
        case "GET /v1/hosts":
          // A page (the default 100 hosts) after a random host: where a client walking the list is.
          return `/v1/hosts?after=${project}`;
        case "GET /v1/projects/:p/environments":
          return `/v1/projects/${project}/environments`;
        case "GET /v1/environments/:p/:e":
          return `/v1/environments/${project}/e${Math.floor(Math.random() * E)}`;
        case "GET /v1/deployments/:id":
          return `/v1/deployments/${pick(deploymentIds)}`;
        default:
          return "/healthz";
      }
    };
    const block = async (
      count: number,
      routeOf: (i: number) => RouteName | typeof HEALTHZ,
      record: boolean,
    ) => {
      await pool(
        Array.from({ length: count }, (_, i) => i),
        p.concurrency,
        async (i) => {
          const route = routeOf(i);
          const path = pathOf(route);
          const r = await api.call("GET", path);
          if (r.status !== 200) {
            errors++;
            if (errorSamples.length < 5) errorSamples.push(`${path}: ${r.status} ${r.text.slice(0, 200)}`);
            return;
          }
          if (!record) return;
          if (route === HEALTHZ) samples.healthz.push(r.ms);
          else samples.routes[route].push(r.ms);
        },
      );
    };
    const mixRoute = (i: number) => ROUTES[i % ROUTES.length] as RouteName;
    const loadBefore = loadavg()[0] ?? 0;
    const measuredFrom = monotonicUs();
    p.check();
    await block(Math.min(100, p.requests), mixRoute, false);
    await block(Math.min(100, p.healthz), () => HEALTHZ, false);
    errors = 0;
    errorSamples.length = 0;
    for (let round = 0; round < p.rounds; round++) {
      p.check();
      await block(Math.round(p.healthz / p.rounds), () => HEALTHZ, true);
      await block(Math.round(p.requests / p.rounds), mixRoute, true);
    }
    const loadAfter = loadavg()[0] ?? 0;
    const mixAll = ROUTES.flatMap((r) => samples.routes[r]);
    const lat = {
      healthz: latency(samples.healthz),
      mix: latency(mixAll),
      routes: Object.fromEntries(ROUTES.map((r) => [r, latency(samples.routes[r])])) as Record<
        RouteName,
        Latency
      >,
    };
    p.log(
      `N=${n}: healthz p50 ${lat.healthz.p50.toFixed(1)} / p99 ${lat.healthz.p99.toFixed(1)} ms; ` +
        `mix p50 ${lat.mix.p50.toFixed(1)} / p99 ${lat.mix.p99.toFixed(1)} ms; ` +
        ROUTES.map((r) => `${r} p99 ${lat.routes[r].p99.toFixed(1)}`).join(", "),
    );

    // 5. Each route alone: one request at a time, the routes in turn.
    p.check();
    const alone = Object.fromEntries([HEALTHZ, ...ROUTES].map((r) => [r, [] as number[]])) as Record<
      RouteName | typeof HEALTHZ,
      number[]
    >;
    for (let i = 0; i < p.isolated; i++) {
      for (const route of [HEALTHZ, ...ROUTES] as const) {
        const r = await api.call("GET", pathOf(route));
        if (r.status === 200) alone[route].push(r.ms);
      }
    }
    const isolated = Object.fromEntries(Object.entries(alone).map(([r, xs]) => [r, latency(xs)])) as Record<
      RouteName | typeof HEALTHZ,
      Latency
    >;
    p.log(
      `N=${n}, one request at a time (p50): ` +
        Object.entries(isolated)
          .map(([r, l]) => `${r} ${l.p50.toFixed(1)} ms`)
          .join(", "),
    );

    const measuredTo = monotonicUs();
    // 6. Memory, with the hosts still connected.
    await sleep(2000);
    const loaded = await cp.rss();
    const heap = await processMemory(api);
    // V8 keeps the heap the setup's burst grew to until its memory reducer runs (8 s after a
    // full GC at the earliest, once allocation is slow): RSS every 5 s, up to a minute, until it
    // stops falling. The hosts stay connected and beating meanwhile; nothing else runs.
    const settled = await settle(cp);
    const afterLoad = await onlineCount();
    const logText = await cp.readLog();

    // 7. The same state in a fresh process: restart on the data dir, every host reconnects, one
    // block of reads, then its memory (no garbage of the 11 deployments per host made above).
    p.check();
    await cp.stop({ keepData: true });
    cp = await startCp(p.repoRoot, {}, cp);
    const api2 = client(cp.url, cp.adminToken);
    t = performance.now();
    await Promise.all(workers.map((w) => w.ask({ type: "reconnect", concurrency: 8 })));
    await untilOnline("restart");
    const restartedOnlineMs = performance.now() - t;
    await sleep(2000);
    const restartedIdle = await cp.rss();
    const restartedReads = Math.round(p.requests / p.rounds);
    await pool(
      Array.from({ length: restartedReads }, (_, i) => i),
      p.concurrency,
      async (i) => {
        await api2.call("GET", pathOf(mixRoute(i)));
      },
    );
    await sleep(2000);
    const restarted = await cp.rss();
    p.log(
      `N=${n}: cp RSS ${(empty.rss / MiB).toFixed(0)} MB empty, ${(loaded.rss / MiB).toFixed(0)} MB after the load ` +
        `(peak ${(loaded.hwm / MiB).toFixed(0)} MB, ${(settled.rss / MiB).toFixed(0)} MB settled); restarted with the same state: ${(restartedIdle.rss / MiB).toFixed(0)} MB ` +
        `once the hosts are back, ${(restarted.rss / MiB).toFixed(0)} MB after a block of reads`,
    );
    const lines = logText.split("\n").filter((l) => l.trim() !== "");
    const levelOf = (l: string) => /"level":"(\w+)"/.exec(l)?.[1] ?? "";
    const unexpected = lines.filter((l) => !/host offline|host online/.test(l));
    return {
      hosts: n,
      envsPerHost: E,
      store: p.store,
      database: db.describe,
      cpNodeOptions: p.cpNodeOptions,
      workers: nw,
      environments,
      deployments: deploymentIds.length,
      perHost,
      online: { afterSetup, afterLoad },
      setupMs: {
        join: joinMs,
        online: onlineMs,
        projects: projectsMs,
        deploys: deploysMs,
        deployMedian: median(deployMs),
        snapshots: snapshotsMs,
        forks: forksMs,
        reconnect: reconnectMs,
      },
      loadAverage: { before: loadBefore, after: loadAfter },
      measuredUs: { from: measuredFrom, to: measuredTo },
      requests: {
        concurrency: p.concurrency,
        mix: mixAll.length,
        healthz: samples.healthz.length,
        errors,
        errorSamples,
      },
      latency: lat,
      samples,
      isolated,
      memory: {
        emptyRssMb: empty.rss / MiB,
        loadedRssMb: loaded.rss / MiB,
        loadedHeap: heap,
        settledRssMb: settled.rss / MiB,
        settledAfterMs: settled.ms,
        peakRssMb: loaded.hwm / MiB,
        restartedIdleRssMb: restartedIdle.rss / MiB,
        restartedRssMb: restarted.rss / MiB,
        restartedReads,
        restartedOnlineMs,
      },
      cpLog: {
        lines: lines.length,
        warnings: lines.filter((l) => levelOf(l) === "warn").length,
        errors: lines.filter((l) => levelOf(l) === "error").length,
        sample: unexpected.slice(0, 5),
      },
      // Filled in below, once the cp exited and wrote them.
      cpuProfiles: profiles,
    };
  } finally {
    await stopWorkers(workers);
    await cp?.stop();
    await db?.close();
    if (p.cpuProfDir) {
      for (const f of await readdir(p.cpuProfDir).catch(() => [])) {
        if (f.endsWith(".cpuprofile") && !before.has(f)) profiles.push(join(p.cpuProfDir, f));
      }
    }
  }
}
