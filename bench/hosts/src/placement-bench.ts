import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import { watchHosts } from "../../../packages/cp/dist/control-plane.js";
import {
  type CandidateHost,
  type Choice,
  choose,
  type Overcommit,
  type PlacementRequest,
  Placer,
} from "../../../packages/cp/dist/engine/placement.js";
import { openStore } from "../../../packages/cp/dist/store/open-store.js";
import type { HostRecord, VersionRecord } from "../../../packages/cp/dist/store/records.js";
import type { Store } from "../../../packages/cp/dist/store/store.js";

/**
 * Placement at many hosts: the cp's pure decision `choose()` over synthetic candidates, next to
 * a floor (one linear scan that picks the online host with the most free memory: what any
 * placement must at least do), and `Placer.place()` end to end against a real SQLite store
 * holding the same hosts and their environments.
 */

const GiB = 1024 ** 3;
const TARGET = "local";
const CREATED = "2026-01-01T00:00:00.000Z";
const NEED = { memory_bytes: 4 * GiB, cpus: 2, pids: 1024 };
const OVERCOMMIT: Overcommit = { memory: 4, cpus: 32, pids: 1 };
/** The cp's default assumed transfer throughput (--placement-transfer-mbps). */
const TRANSFER_MBPS = 200;
const VERSION_BYTES = 1.2 * GiB;

export interface Latency {
  n: number;
  p50: number;
  p99: number;
  max: number;
  mean: number;
}

export interface PlacementResult {
  candidates: number;
  offline: number;
  draining: number;
  holders: string[];
  /** What the decisions picked: by kind, how many went to a holder of the version, how many failed. */
  outcomes: { fork: number; deploy: number; forkToHolder: number; noHost: number };
  /** µs per decision, interleaved with the floor. */
  choose: Latency;
  floor: Latency;
  placer?: {
    environments: number;
    projects: number;
    setupMs: number;
    /** µs per `Placer.place()`. */
    latency: Latency;
    /** Calls that found no host (a DenvError from choose): counted, and timed like the others. */
    noHost: number;
  };
}

/** mulberry32: the same synthetic fleet on every run. */
function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function latency(us: number[]): Latency {
  const s = [...us].sort((a, b) => a - b);
  const at = (q: number) => s[Math.min(s.length - 1, Math.floor(q * s.length))] ?? Number.NaN;
  return {
    n: s.length,
    p50: at(0.5),
    p99: at(0.99),
    max: s.at(-1) ?? Number.NaN,
    mean: s.reduce((x, y) => x + y, 0) / Math.max(1, s.length),
  };
}

interface Fleet {
  hosts: CandidateHost[];
  holders: string[];
}

/**
 * `n` hosts: 4 zones, a GPU on one in ten (in every zone), memory 32-256 GiB, 8-64 cpus, a pids limit on half;
 * about 5 % offline and 2 % draining; each already committed 0-110 % of its memory (some full);
 * three of them hold the version.
 */
function fleet(n: number, rand: () => number): Fleet {
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)] as T;
  const hosts: CandidateHost[] = [];
  for (let i = 0; i < n; i++) {
    const memory = pick([32, 64, 128, 256]) * GiB;
    const cpus = pick([8, 16, 32, 64]);
    const pids = i % 2 === 0 ? 4_194_304 : undefined;
    const record: HostRecord = {
      id: `h${String(i).padStart(4, "0")}`,
      target: TARGET,
      credentialHash: `c${i}`,
      status: "online",
      // A GPU on 4 hosts in every 40: one in each zone.
      labels: { zone: `z${i % 4}`, ...(Math.floor(i / 4) % 10 === 0 ? { gpu: "a100" } : {}) },
      capacity: { cpus, memory_bytes: memory, disk_free_bytes: 500 * GiB, ...(pids ? { pids } : {}) },
      ...(rand() < 0.02 ? { drainingAt: CREATED } : {}),
      createdAt: CREATED,
    };
    const used = rand() * 1.1;
    hosts.push({
      host: record,
      online: rand() >= 0.05,
      environments: Math.floor(rand() * 40),
      reserved: {
        memory_bytes: Math.round(memory * OVERCOMMIT.memory * used),
        cpus: Math.round(cpus * OVERCOMMIT.cpus * used * rand()),
        pids: Math.round((pids ?? 0) * used * rand()),
      },
      local: false,
    });
  }
  // Three holders, spread out: one low, one in the middle, one high.
  const holders = [Math.floor(n * 0.07), Math.floor(n * 0.4), n - 1].map((i) => {
    const h = hosts[i] as CandidateHost;
    h.local = true;
    h.online = true;
    return h.host.id;
  });
  return { hosts, holders };
}

/** The least any placement does: one pass, online, not draining, labels, memory; the most free memory wins. */
function floor(c: Choice): string | undefined {
  const wanted = Object.entries(c.labels);
  let best: string | undefined;
  let bestFree = -1;
  for (const h of c.hosts) {
    if (!h.online || h.host.drainingAt !== undefined) continue;
    if (wanted.some(([k, v]) => h.host.labels[k] !== v)) continue;
    const free = (h.host.capacity?.memory_bytes ?? 0) * c.overcommit.memory - h.reserved.memory_bytes;
    if (free >= c.need.memory_bytes && free > bestFree) {
      bestFree = free;
      best = h.host.id;
    }
  }
  return best;
}

/** Decision i: even ones fork the version, odd ones deploy with a zone label (every tenth with a GPU too). */
function decision(i: number, f: Fleet): Choice {
  const base = {
    target: TARGET,
    hosts: f.hosts,
    need: NEED,
    overcommit: OVERCOMMIT,
    transferBytesPerSecond: TRANSFER_MBPS * 1e6,
  };
  if (i % 2 === 0) {
    return {
      ...base,
      labels: {},
      version: { id: "p000@v1", origin: f.holders[0] as string, bytes: VERSION_BYTES },
    };
  }
  return {
    ...base,
    labels: { zone: `z${i % 4}`, ...(i % 20 === 1 ? { gpu: "a100" } : {}) },
    newest: "p001@v1",
  };
}

export interface PlacementOptions {
  candidates: number;
  decisions: number;
  warmup: number;
  /** Placer.place() calls against SQLite (0: skip). */
  placerDecisions: number;
  /** Environments in the store for Placer (spread over the online hosts). */
  environments: number;
  log: (line: string) => void;
  check: () => void;
}

export async function placementBench(o: PlacementOptions): Promise<PlacementResult> {
  const rand = prng(11);
  const f = fleet(o.candidates, rand);
  const chooseUs: number[] = [];
  const floorUs: number[] = [];
  const outcomes = { fork: 0, deploy: 0, forkToHolder: 0, noHost: 0 };
  const holders = new Set(f.holders);
  o.log(
    `placement: ${o.candidates} candidates, ${o.warmup} + ${o.decisions} decisions of choose() and of the floor, interleaved`,
  );
  for (let i = 0; i < o.warmup + o.decisions; i++) {
    if (i % 500 === 0) o.check();
    // What placing does to the fleet between decisions (not timed): a host's commitments move.
    const moved = f.hosts[Math.floor(rand() * f.hosts.length)] as CandidateHost;
    const mem = (moved.host.capacity?.memory_bytes ?? 0) * OVERCOMMIT.memory;
    moved.reserved = { ...moved.reserved, memory_bytes: Math.round(mem * rand() * 1.1) };
    const c = decision(i, f);
    const measured = i >= o.warmup;
    const runChoose = () => {
      const t0 = performance.now();
      let host: string | undefined;
      try {
        host = choose(c).hostId;
      } catch {
        host = undefined;
      }
      const us = (performance.now() - t0) * 1000;
      if (measured) {
        chooseUs.push(us);
        if (c.version) outcomes.fork++;
        else outcomes.deploy++;
        if (host === undefined) outcomes.noHost++;
        else if (c.version && holders.has(host)) outcomes.forkToHolder++;
      }
    };
    const runFloor = () => {
      const t0 = performance.now();
      floor(c);
      if (measured) floorUs.push((performance.now() - t0) * 1000);
    };
    // ABBA, so that neither always runs on the other's warm caches.
    if (i % 2 === 0) {
      runChoose();
      runFloor();
    } else {
      runFloor();
      runChoose();
    }
  }
  const result: PlacementResult = {
    candidates: o.candidates,
    offline: f.hosts.filter((h) => !h.online).length,
    draining: f.hosts.filter((h) => h.host.drainingAt !== undefined).length,
    holders: f.holders,
    outcomes,
    choose: latency(chooseUs),
    floor: latency(floorUs),
  };
  if (o.placerDecisions > 0) {
    o.check();
    result.placer = await placerBench(f, o);
  } else o.log("placement: Placer.place() skipped (--placer-decisions 0)");
  return result;
}

/**
 * The same fleet in a real SQLite store (a temporary file, as the cp opens it): the hosts, the
 * environments they run (caps in their evidence: what reservations are summed from), 1 + 200
 * projects, the version and its 3 replicas. `Placer.place()` reads all of it on every call.
 */
async function placerBench(f: Fleet, o: PlacementOptions): Promise<NonNullable<PlacementResult["placer"]>> {
  const dir = await mkdtemp(join(tmpdir(), "denv-bench-placer-"));
  let store: Store | undefined;
  try {
    const t0 = performance.now();
    store = await openStore(join(dir, "cp.sqlite"));
    if (!(await store.getTarget(TARGET)))
      await store.createTarget({ name: TARGET, kind: "hosts", createdAt: CREATED });
    for (const h of f.hosts) await store.createHost({ ...h.host, status: h.online ? "online" : "offline" });
    const projects = 200;
    for (let p = 0; p < projects; p++)
      await store.createProject({
        name: `p${String(p).padStart(3, "0")}`,
        kind: "rl-environment",
        composePath: "compose.yaml",
        createdAt: CREATED,
      });
    const online = f.hosts.filter((h) => h.online);
    for (let i = 0; i < o.environments; i++) {
      const project = `p${String(i % projects).padStart(3, "0")}`;
      const host = online[(i * 7919) % online.length] as CandidateHost;
      await store.putEnvironment({
        id: `${project}/e${i}`,
        project,
        name: `e${i}`,
        hostId: host.host.id,
        hostEnv: `e${i}`,
        status: "running",
        version: `${project}@v1`,
        sandbox: false,
        services: [],
        evidence: { caps: { memory_bytes: 2 * GiB, cpus: 2, pids: 1024 } },
        createdAt: CREATED,
        updatedAt: CREATED,
      });
    }
    const version: VersionRecord = {
      id: "p000@v1",
      project: "p000",
      number: 1,
      host_id: f.holders[0] as string,
      source_environment: "p000/e0",
      digests: { main: "sha256:0", side: "sha256:1" },
      volumes: { data: { snapshot: "s0", bytes: VERSION_BYTES / 2 } },
      method: "btrfs",
      sizes: { layer_bytes: VERSION_BYTES / 2, volume_bytes: VERSION_BYTES / 2 },
      timings: {},
      created_at: CREATED,
    };
    await store.createVersion(version);
    for (const h of f.holders.slice(1)) await store.putReplica(version.id, h, CREATED);
    const setupMs = performance.now() - t0;
    o.log(
      `placement: Placer.place() against SQLite (${f.hosts.length} hosts, ${o.environments} environments, set up in ${setupMs.toFixed(0)} ms)`,
    );
    const onlineIds = new Set(online.map((h) => h.host.id));
    // As in the cp: the host rows and what each host holds are read once and kept in memory
    // (nothing writes the store from here on, so nothing invalidates them).
    const { store: watched, hostList, hostLoad } = watchHosts(store);
    const placer = new Placer(
      watched,
      { isOnline: (id: string) => onlineIds.has(id) },
      { hosts: hostList, load: hostLoad },
      {
        overcommit: OVERCOMMIT,
        transferMbps: TRANSFER_MBPS,
      },
    );
    const warmup = Math.min(10, o.placerDecisions);
    const us: number[] = [];
    let noHost = 0;
    for (let i = 0; i < warmup + o.placerDecisions; i++) {
      if (i % 50 === 0) o.check();
      const req: PlacementRequest =
        i % 2 === 0
          ? { version, deployment: `d${i}` }
          : {
              target: TARGET,
              project: "p001",
              environment: "p001/new",
              labels: { zone: `z${i % 4}` },
              deployment: `d${i}`,
            };
      const t1 = performance.now();
      const placed = await placer.place(req).then(
        () => true,
        () => false,
      );
      if (i >= warmup) {
        us.push((performance.now() - t1) * 1000);
        if (!placed) noHost++;
      }
    }
    return { environments: o.environments, projects, setupMs, latency: latency(us), noHost };
  } finally {
    await store?.close();
    await rm(dir, { recursive: true, force: true });
  }
}
