import { mkdir, rm, writeFile } from "node:fs/promises";
import { cpus } from "node:os";
import { dirname, join, resolve } from "node:path";
import { performance } from "node:perf_hooks";
import { fileURLToPath } from "node:url";
import type { DenvClient } from "@denv/sdk";
import type { Stack } from "../../../packages/cli/dist/e2e/stack.js";
import { type BenchStack, PROJECT, startBenchStack } from "../../api/dist/denv-stack.js";
import { readArgs } from "../../runtime/dist/args.js";
import { log } from "../../runtime/dist/host.js";
import { newTempDir } from "../../runtime/dist/stacks.js";
import {
  median,
  printFooter,
  type Row,
  ratioOf,
  round,
  table,
  verdict,
  writeResults,
} from "../../runtime/dist/stats.js";

/**
 * bench/pools: what a warm fork pool buys. A sandbox claimed from the pool vs one forked cold,
 * and episodes per minute (claim a sandbox, 3 execs, verify it on a fork, destroy it) at several
 * in flight, with a pool as large as the concurrency vs with none, on the same stack in the same
 * run. Every verify must grade the episode 1.0 (its 3 execs wrote 3 lines the verifier counts).
 */

const USAGE = `usage: node bench/pools/run.mjs [--smoke] [--claims N] [--concurrency 1,8,32] [--episodes N] [--no-verify] [--verifier-services]

  --smoke            3 claims each way, concurrency 1,2, 1 episode per slot (about 1 minute)
  --claims N         sandboxes created one by one, each way (default 10)
  --concurrency L    episodes in flight (default 1,8,32)
  --episodes N       episodes per slot in flight, each way (default 3)
  --no-verify        episodes without their verify (claim, 3 execs, destroy)
  --verifier-services  the verify's fork starts its services (the default for a verifier; this
                     one reads only files, so the benchmark gives it x-denv.verifier.services: false)
  Needs root and a running Docker engine (scripts/setup-host).`;

const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");

/**
 * Two services, one volume, small caps: 32 in flight, a pool of 32 and the 32 verify forks fit
 * one 2-core host at the cp's default cpu overcommit (32: 64 cpus to place; half a cpu each here).
 */
const compose = (verifierServices: boolean) => `services:
  main:
    image: debian:bookworm-slim
    command: ["sleep", "infinity"]
    init: true
    volumes: [data:/data]
    mem_limit: 128m
    cpus: 0.25
  side:
    image: debian:bookworm-slim
    command: ["sleep", "infinity"]
    init: true
    mem_limit: 128m
    cpus: 0.25
volumes:
  data: {}
x-denv:
  agent: main
  verifier:
    image: debian:bookworm-slim${verifierServices ? "" : "\n    services: false"}
    command: ["sh", "-c", 'if [ "$$(wc -l < /submission/workspace/log)" -eq 3 ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt']
    timeout: 60
    submission: [/workspace/log]
`;

interface Config {
  smoke: boolean;
  claims: number;
  concurrency: number[];
  episodes: number;
  verify: boolean;
  verifierServices: boolean;
}

function config(argv: string[]): Config {
  const c: Config = {
    smoke: false,
    claims: 10,
    concurrency: [1, 8, 32],
    episodes: 3,
    verify: true,
    verifierServices: false,
  };
  readArgs(argv, USAGE, (arg, r) => {
    if (arg === "--smoke") Object.assign(c, { smoke: true, claims: 3, concurrency: [1, 2], episodes: 1 });
    else if (arg === "--claims") c.claims = r.count();
    else if (arg === "--episodes") c.episodes = r.count();
    else if (arg === "--no-verify") c.verify = false;
    else if (arg === "--verifier-services") c.verifierServices = true;
    else if (arg === "--concurrency") c.concurrency = r.value().split(",").map(Number);
    else return false;
    return true;
  });
  return c;
}

const pct = (values: number[], p: number) => {
  const s = [...values].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)] ?? Number.NaN;
};

async function waitReady(client: DenvClient, size: number): Promise<void> {
  const until = Date.now() + 600_000;
  for (;;) {
    checkInterrupted();
    const p = await client.getPool(PROJECT);
    if (p.ready >= size && p.filling === 0) return;
    if (Date.now() > until) throw new Error(`the pool holds ${p.ready} of ${size} forks after 10 minutes`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

/** Ctrl-C (or SIGTERM): the episodes under way end, nothing new starts, then the stack is cleaned up. */
let interrupted = false;
function stopOnSignals(): void {
  for (const sig of ["SIGINT", "SIGTERM"] as const) {
    process.on(sig, () => {
      if (!interrupted) log(`${sig}: stopping after the episodes under way, then cleaning up`);
      interrupted = true;
    });
  }
}
const checkInterrupted = () => {
  if (interrupted) throw new Error("interrupted");
};

let seq = 0;
/** One sandbox, created and timed; `pool` says whether it was a claim. */
async function sandbox(
  client: DenvClient,
): Promise<{ id: string; ms: number; pool: string; probeMs: number | undefined }> {
  const t0 = performance.now();
  const s = await client.createSandbox({ project: PROJECT, name: `b${++seq}`, ttl_sec: 900 });
  // A claim's probe, as its host timed it (the part of the claim that proves isolation again).
  const claim = s.evidence?.pool as { probe?: { duration_ms?: number } } | undefined;
  return { id: s.id, ms: performance.now() - t0, pool: s.pool ?? "miss", probeMs: claim?.probe?.duration_ms };
}

interface EpisodeRun {
  ms: number;
  latencies: number[];
  /** Each episode's verify (snapshot, fork, verifier, collect), alone. */
  verifies: number[];
  /** Each verify's phases and their durations (ms), for where the time goes. */
  verifyPhases: Array<Record<string, number>>;
  failures: number;
  hits: number;
}

/** `n` episodes at `inFlight` at once: claim, 3 execs, verify, destroy (and the episode's version deleted). */
async function episodes(
  client: DenvClient,
  inFlight: number,
  n: number,
  verify: boolean,
): Promise<EpisodeRun> {
  const latencies: number[] = [];
  const verifies: number[] = [];
  const verifyPhases: Array<Record<string, number>> = [];
  let failures = 0;
  let hits = 0;
  let next = 0;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: inFlight }, async () => {
      while (next < n && !interrupted) {
        next++;
        const e0 = performance.now();
        try {
          const s = await sandbox(client);
          if (s.pool === "hit") hits++;
          for (let i = 0; i < 3; i++) {
            const r = await client.exec(s.id, { cmd: ["sh", "-c", `echo step ${i} >> /workspace/log`] });
            if (r.exit_code !== 0) throw new Error(`exec exited ${r.exit_code}`);
          }
          if (verify) {
            const v0 = performance.now();
            const d = await client.verify(s.id, { wait: true });
            const graded = d.result as { status?: string; reward?: number; version?: string } | undefined;
            if (d.status !== "succeeded" || graded?.status !== "graded" || graded.reward !== 1) {
              throw new Error(`verify: ${d.status}, ${JSON.stringify(graded ?? d.error)}`);
            }
            verifies.push(performance.now() - v0);
            verifyPhases.push(Object.fromEntries(d.phases.map((p) => [p.name, p.duration_ms ?? 0])));
            await client.deleteSandbox(s.id);
            if (graded.version) await client.deleteVersion(graded.version);
          } else {
            await client.deleteSandbox(s.id);
          }
          latencies.push(performance.now() - e0);
        } catch (err) {
          failures++;
          log(`episode failed: ${(err as Error).message}`);
        }
      }
    }),
  );
  return { ms: performance.now() - t0, latencies, verifies, verifyPhases, failures, hits };
}

async function main(): Promise<number> {
  const cfg = config(process.argv.slice(2));
  stopOnSignals();
  const startedAt = new Date();
  const tmp = await newTempDir();
  const stacks: Stack[] = [];
  let failure: Error | undefined;
  const rows: Row[] = [];
  const raw: Record<string, unknown> = { config: cfg, cpus: cpus().length };
  const problems: string[] = [];
  let bench: BenchStack | undefined;
  try {
    const dir = join(tmp, "small");
    await mkdir(dir, { recursive: true });
    await writeFile(join(dir, "compose.yaml"), compose(cfg.verifierServices));
    log("starting the stack (denv up) and deploying the small stack");
    bench = await startBenchStack(dir, tmp, (s) => stacks.push(s));
    const { client } = bench;

    // 1. One sandbox at a time: cold, then claimed from a pool refilled between claims.
    const cold: number[] = [];
    for (let i = 0; i < cfg.claims; i++) {
      checkInterrupted();
      const s = await sandbox(client);
      if (s.pool !== "miss") throw new Error(`a sandbox without a pool said pool: ${s.pool}`);
      cold.push(s.ms);
      await client.deleteSandbox(s.id);
    }
    await client.setPool(PROJECT, 1);
    const warm: number[] = [];
    const probes: number[] = [];
    for (let i = 0; i < cfg.claims; i++) {
      await waitReady(client, 1);
      const s = await sandbox(client);
      if (s.pool !== "hit") throw new Error(`a claim from a ready pool said pool: ${s.pool}`);
      warm.push(s.ms);
      if (s.probeMs !== undefined) probes.push(s.probeMs);
      await client.deleteSandbox(s.id);
    }
    raw.claims = { cold, warm, probes };
    const claimRow: Row = {
      name: "sandbox ready: claimed from the pool vs forked cold (median)",
      denv: round(median(warm)),
      baseline: round(median(cold)),
      baselineName: "cold fork, no pool",
      unit: "ms",
      ratioKind: "baseline/denv",
      target: "info",
      verdict: "info",
      note:
        `p99 claim ${round(pct(warm, 99))} ms, p99 cold ${round(pct(cold, 99))} ms` +
        (probes.length > 0
          ? `; the claim's egress probe on its host: median ${round(median(probes))} ms`
          : ""),
    };
    claimRow.ratio = ratioOf(claimRow);
    rows.push(claimRow);

    // 2. Episodes per minute at each concurrency: without a pool, then with one that size.
    const perLevel: Record<string, unknown> = {};
    for (const c of cfg.concurrency) {
      const n = c * cfg.episodes;
      await client.setPool(PROJECT, 0);
      await waitZero(client);
      checkInterrupted();
      log(`episodes: ${n} at ${c} in flight, no pool`);
      const base = await episodes(client, c, n, cfg.verify);
      await client.setPool(PROJECT, c);
      await waitReady(client, c);
      log(`episodes: ${n} at ${c} in flight, pool of ${c}`);
      const pooled = await episodes(client, c, n, cfg.verify);
      checkInterrupted();
      perLevel[c] = { base, pooled };
      const rate = (r: EpisodeRun) => (r.latencies.length / r.ms) * 60_000;
      const verified = (r: EpisodeRun) =>
        cfg.verify ? `, verify p50 ${round(median(r.verifies))} ms p99 ${round(pct(r.verifies, 99))} ms` : "";
      const row: Row = {
        name: `episodes per minute at ${c} in flight (claim, 3 execs, ${cfg.verify ? `verify on a fork${cfg.verifierServices ? " with its services" : ""}, ` : ""}destroy)`,
        denv: round(rate(pooled)),
        baseline: round(rate(base)),
        baselineName: "no pool",
        unit: "trials/min",
        ratioKind: "throughput",
        target: "0 failures",
        verdict: verdict(pooled.failures === 0 && base.failures === 0),
        note: `pool: ${pooled.hits}/${n} hits, p50 ${round(median(pooled.latencies))} ms, p99 ${round(pct(pooled.latencies, 99))} ms${verified(pooled)}, ${pooled.failures} failed; no pool: p50 ${round(median(base.latencies))} ms, p99 ${round(pct(base.latencies, 99))} ms${verified(base)}, ${base.failures} failed`,
      };
      row.ratio = ratioOf(row);
      rows.push(row);
    }
    raw.episodes = perLevel;
    await client.setPool(PROJECT, 0);
    await waitZero(client);
  } catch (err) {
    failure = err instanceof Error ? err : new Error(String(err));
  } finally {
    for (const s of stacks)
      await s.close().catch((err: Error) => problems.push(`stack close: ${err.message}`));
    await rm(tmp, { recursive: true, force: true });
  }
  console.log(table(rows));
  const file = await writeResults(repoRoot, "pools", startedAt, { ...raw, rows });
  return printFooter({ file, concurrent: { atStart: [], atEnd: [] }, problems, failure });
}

async function waitZero(client: DenvClient): Promise<void> {
  const until = Date.now() + 300_000;
  while (Date.now() < until && !interrupted) {
    const p = await client.getPool(PROJECT);
    if (p.ready === 0 && p.filling === 0) return;
    await new Promise((r) => setTimeout(r, 200));
  }
  checkInterrupted();
  throw new Error("the pool did not empty");
}

process.exitCode = await main();
