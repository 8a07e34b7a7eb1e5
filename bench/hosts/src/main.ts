import { existsSync, readdirSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { cpus, loadavg, release, tmpdir, totalmem } from "node:os";
import { dirname, join, resolve } from "node:path";
import { performance } from "node:perf_hooks";
import { fileURLToPath } from "node:url";
import { type Hosts, startHosts } from "../../../packages/cli/dist/e2e/hosts-fixture.js";
import { readArgs } from "../../runtime/dist/args.js";
import { log, run } from "../../runtime/dist/host.js";
import {
  printFooter,
  type Row,
  ratioOf,
  round,
  table,
  verdict,
  writeResults,
} from "../../runtime/dist/stats.js";
import { type PlacementResult, placementBench } from "./placement-bench.js";
import { localForkMs, type TransferResult, transferBench } from "./transfer-bench.js";

const USAGE = `usage: node bench/hosts/run.mjs [--smoke] [--only transfer,placement] [--path relay|direct]
                                [--volume-mib N] [--files N] [--layer-mib N] [--local-forks N]
                                [--candidates N] [--decisions N] [--placer-decisions N] [--environments N]

  --smoke               a 16 MiB / 500-file volume and 4 MiB in the layer, 1 local fork, 1,000
                        decisions, 20 Placer calls (under a minute)
  --only LIST           run only these benchmarks
  --path relay|direct   how the version goes from a to b: through the cp (default), or straight to
                        b's transfer listener (denvd --transfer-listen, cp --transfer-path direct)
  --volume-mib N        the version's volume (default 960)
  --files N             files in the volume (default 10000)
  --layer-mib N         a file committed in the agent's layer (default 64)
  --local-forks N       forks on the holder (median; default 3)
  --candidates N        synthetic hosts placement decides among (default 1000)
  --decisions N         measured choose() decisions (default 5000, after 500 warm-up)
  --placer-decisions N  measured Placer.place() calls against SQLite (default 200; 0 skips it)
  --environments N      environments in that store (default 2000)
  Needs root (network namespaces, one dockerd per host, btrfs loop files) and dockerd on the PATH.`;

const ALL = ["transfer", "placement"] as const;
type Section = (typeof ALL)[number];

interface Config {
  smoke: boolean;
  only: Set<Section>;
  path: "relay" | "direct";
  volumeMiB: number;
  files: number;
  layerMiB: number;
  localForks: number;
  candidates: number;
  decisions: number;
  warmup: number;
  placerDecisions: number;
  environments: number;
}

function parseArgs(argv: string[]): Config {
  const smoke = argv.includes("--smoke");
  const c: Config = {
    smoke,
    only: new Set(ALL),
    path: "relay",
    ...(smoke
      ? {
          volumeMiB: 16,
          files: 500,
          layerMiB: 4,
          localForks: 1,
          decisions: 1000,
          warmup: 100,
          placerDecisions: 20,
        }
      : {
          volumeMiB: 960,
          files: 10_000,
          layerMiB: 64,
          localForks: 3,
          decisions: 5000,
          warmup: 500,
          placerDecisions: 200,
        }),
    candidates: 1000,
    environments: 2000,
  };
  readArgs(argv, USAGE, (arg, r) => {
    if (arg === "--smoke") return true;
    if (arg === "--only") c.only = new Set(r.oneOf(ALL, "benchmark"));
    else if (arg === "--path") {
      const p = r.value();
      if (p !== "relay" && p !== "direct") throw new Error("--path is relay or direct");
      c.path = p;
    } else if (arg === "--volume-mib") c.volumeMiB = r.count();
    else if (arg === "--files") c.files = r.count();
    else if (arg === "--layer-mib") c.layerMiB = r.count();
    else if (arg === "--local-forks") c.localForks = r.count();
    else if (arg === "--candidates") c.candidates = r.count();
    else if (arg === "--decisions") c.decisions = r.count();
    else if (arg === "--placer-decisions") c.placerDecisions = Number(r.value());
    else if (arg === "--environments") c.environments = r.count();
    else return false;
    return true;
  });
  if (!Number.isInteger(c.placerDecisions) || c.placerDecisions < 0)
    throw new Error("--placer-decisions needs a whole number");
  return c;
}

const MiB = 1024 ** 2;
const GiB = 1024 ** 3;
/** b's transfer listener (in b's own network namespace) for --path direct. */
const TRANSFER_PORT = 7421;

interface Results {
  fixture?: { id: string; startMs: number; startStages: Record<string, number>; closeMs?: number };
  transfer?: TransferResult;
  placement?: PlacementResult;
}

/** What else runs on this machine: containers on its engine, other hosts fixtures (by id), the load. */
async function machineLoad(mine: string | undefined): Promise<{ containers: string[]; fixtures: string[] }> {
  const ps = await run("docker", ["ps", "--format", "{{.Names}}"]).catch(() => ({ code: 1, stdout: "" }));
  const containers = ps.code === 0 ? ps.stdout.split("\n").filter(Boolean) : [];
  const fixtures = existsSync("/run/dvt")
    ? readdirSync("/run/dvt").filter((d) => /^[0-9a-f]{4}$/.test(d) && d !== mine)
    : [];
  return { containers, fixtures };
}

/** What the fixture must not leave: its namespaces, links and folders. */
async function leftovers(id: string): Promise<string[]> {
  const out: string[] = [];
  const ns = (await run("ip", ["netns", "list"])).stdout.split("\n").filter((l) => l.startsWith(`dvt${id}-`));
  if (ns.length > 0) out.push(`network namespaces: ${ns.map((l) => l.split(" ")[0]).join(", ")}`);
  const links = (await run("ip", ["-o", "link", "show"])).stdout
    .split("\n")
    .map((l) => (l.split(": ")[1] ?? "").split("@")[0] ?? "")
    .filter((l) => l.startsWith(`dvt${id}`));
  if (links.length > 0) out.push(`links: ${links.join(", ")}`);
  for (const d of [`/run/dvt/${id}`, `/var/lib/dvt/${id}`]) if (existsSync(d)) out.push(`${d} still exists`);
  return out;
}

async function main(): Promise<number> {
  const cfg = parseArgs(process.argv.slice(2));
  const has = (s: Section) => cfg.only.has(s);
  const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
  const startedAt = new Date();
  const t0 = performance.now();
  if (has("transfer") && process.getuid?.() !== 0)
    throw new Error("run as root: the hosts fixture makes network namespaces and starts a dockerd per host");

  let aborted = false;
  const check = () => {
    if (aborted) throw new Error("interrupted");
  };
  for (const sig of ["SIGINT", "SIGTERM"] as const) {
    process.on(sig, () => {
      aborted = true;
      log(`${sig}: stopping after the current step, then cleaning up`);
    });
  }

  const docker = has("transfer")
    ? (await run("docker", ["version", "--format", "{{.Server.Version}}"])).stdout.trim()
    : undefined;
  const machine = {
    cpus: cpus().length,
    memGiB: round(totalmem() / GiB, 1),
    kernel: release(),
    node: process.version,
    ...(docker ? { docker } : {}),
  };
  log(`${cfg.smoke ? "smoke" : "full"} run, ${machine.cpus} CPUs, node ${machine.node}`);
  const atStart = { ...(await machineLoad(undefined)), loadavg: loadavg()[0] ?? 0 };

  const results: Results = {};
  const problems: string[] = [];
  let failure: Error | undefined;
  let fx: Hosts<"a" | "b"> | undefined;
  const scratch = await mkdtemp(join(tmpdir(), "denv-bench-hosts-"));
  try {
    if (has("transfer")) {
      log("starting the hosts fixture: a cp and two denvd (a, b), each with its own dockerd and netns");
      fx = await startHosts({
        hosts: [
          // a holds two environments of 2 x 512 MiB: the parent and one local fork. Then it is
          // full, and the next fork has to go to b.
          { name: "a", labels: { node: "a" }, denvdArgs: ["--capacity-memory", String(2 * GiB)] },
          {
            name: "b",
            labels: { node: "b" },
            denvdArgs: cfg.path === "direct" ? ["--transfer-listen", `0.0.0.0:${TRANSFER_PORT}`] : [],
          },
        ],
        cpArgs: ["--placement-overcommit-memory", "1", "--transfer-path", cfg.path],
      });
      results.fixture = { id: fx.id, startMs: fx.startMs, startStages: fx.startStages };
      log(`fixture ${fx.id} up in ${(fx.startMs / 1000).toFixed(1)} s`);
      results.transfer = await transferBench(fx, {
        scratch,
        volumeBytes: cfg.volumeMiB * MiB,
        files: cfg.files,
        layerBytes: cfg.layerMiB * MiB,
        localForks: cfg.localForks,
        path: cfg.path,
        log,
        check,
      });
    }
    if (has("placement")) {
      check();
      results.placement = await placementBench({
        candidates: cfg.candidates,
        decisions: cfg.decisions,
        warmup: cfg.warmup,
        placerDecisions: cfg.placerDecisions,
        environments: cfg.environments,
        log,
        check,
      });
    }
  } catch (err) {
    failure = err as Error;
    log(`FAILED: ${failure.stack ?? failure.message}`);
  } finally {
    log("cleaning up");
    if (fx) {
      const id = fx.id;
      try {
        const ms = await fx.close();
        if (results.fixture) results.fixture.closeMs = ms;
      } catch (err) {
        problems.push((err as Error).message);
      }
      problems.push(...(await leftovers(id)));
    }
    await rm(scratch, { recursive: true, force: true });
  }

  const atEnd = { ...(await machineLoad(results.fixture?.id)), loadavg: loadavg()[0] ?? 0 };
  // Fixtures of others seen at the start are everyone's but ours (ours did not exist yet).
  const othersAtStart = atStart.fixtures;
  const rows = summaryRows(results);
  const out = {
    mode: cfg.smoke ? "smoke" : "full",
    startedAt: startedAt.toISOString(),
    finishedAt: new Date().toISOString(),
    durationMs: Math.round(performance.now() - t0),
    machine,
    busy: { atStart: { ...atStart, fixtures: othersAtStart }, atEnd },
    config: { ...cfg, only: [...cfg.only] },
    summary: rows,
    results,
    cleanupProblems: problems,
    ...(failure ? { error: failure.message } : {}),
  };
  const file = await writeResults(repoRoot, "hosts", startedAt, out);

  console.log("");
  console.log(
    `denv many-hosts benchmark (${cfg.smoke ? "SMOKE: a small version, few samples; numbers are not meaningful" : "full"}; ` +
      `${machine.cpus} CPUs, node ${machine.node}${machine.docker ? `, docker ${machine.docker}` : ""})`,
  );
  console.log("");
  console.log(table(rows));
  console.log("");
  console.log(
    `machine load (1-min average): ${atStart.loadavg.toFixed(2)} at the start, ${atEnd.loadavg.toFixed(2)} at the end, on ${machine.cpus} CPUs`,
  );
  const fixtures = new Set([...othersAtStart, ...atEnd.fixtures]);
  if (fixtures.size > 0)
    console.log(
      `WARNING: other hosts fixtures ran on this machine during the run (${[...fixtures].join(", ")}); numbers may be noisy`,
    );
  return printFooter({
    file,
    concurrent: { atStart: atStart.containers, atEnd: atEnd.containers },
    problems,
    failure,
  });
}

function summaryRows(r: Results): Row[] {
  const rows: Row[] = [];
  const add = (row: Omit<Row, "ratio">) => {
    const ratio = ratioOf(row);
    rows.push({ ...row, ...(ratio !== undefined ? { ratio: round(ratio, 2) } : {}) });
  };
  const mib = (n: number) => `${(n / MiB).toFixed(0)} MiB`;
  if (r.transfer) {
    const t = r.transfer;
    const e = t.transferFork.evidence;
    const b = t.baseline;
    const size = `${mib(t.version.layerBytes + t.version.volumeBytes)}, ${t.data.files} files`;
    add({
      name: `version transfer a -> b ${e.path === "direct" ? "direct" : "through the cp"} (${size})`,
      denv: round(e.duration_ms, 0),
      baseline: round(b.totalMs, 0),
      baselineName: "docker save | docker load + tar | tar",
      unit: "ms",
      ratioKind: "baseline/denv",
      target: ">= 3x",
      verdict: verdict(b.totalMs / e.duration_ms >= 3),
      note:
        `denv: ${mib(e.bytes)} sent at ${e.mib_per_s} MiB/s, ${e.layers_sent} layers sent, ${e.layers_skipped} skipped ` +
        `(on b already), ${e.attempts} attempt(s); baseline: save | load ${b.saveLoadMs.toFixed(0)} ms ` +
        `(${mib(b.saveBytes)}: whole images, base layers too), tar | tar ${b.tarMs.toFixed(0)} ms (${mib(b.tarBytes)}), ` +
        `one after the other, ${(((b.saveBytes + b.tarBytes) / MiB / b.totalMs) * 1000).toFixed(0)} MiB/s; ` +
        `the baseline ran ${b.order}`,
    });
    const local = localForkMs(t);
    const bound = 2 * local + e.duration_ms;
    const phases = (p: Record<string, number>) =>
      Object.entries(p)
        .filter(([, ms]) => ms > 0)
        .map(([k, ms]) => `${k} ${ms.toFixed(0)}`)
        .join(", ");
    add({
      name: "fork needing a transfer vs a local fork on the holder",
      denv: round(t.transferFork.ms, 0),
      baseline: round(local, 0),
      baselineName: `local fork on a, median of ${t.localForks.length}`,
      unit: "ms",
      ratioKind: "denv/baseline",
      target: "<= 2 x local + transfer",
      verdict: verdict(t.transferFork.ms <= bound),
      note:
        `bound ${bound.toFixed(0)} ms (2 x ${local.toFixed(0)} + ${e.duration_ms}); transfer fork's phases (ms): ` +
        `${phases(t.transferFork.phases)}; a local fork's: ${phases(t.localForks.at(-1)?.phases ?? {})}; ` +
        `the fork without its transfer: ${(t.transferFork.ms - e.duration_ms).toFixed(0)} ms`,
    });
  }
  if (r.placement) {
    const p = r.placement;
    const tag = `${p.candidates} hosts`;
    const shape =
      `${p.offline} offline, ${p.draining} draining, the version on 3; ${p.choose.n} decisions ` +
      `(${p.outcomes.fork} forks, ${p.outcomes.forkToHolder} of them to a holder; ${p.outcomes.deploy} deploys ` +
      `with labels; ${p.outcomes.noHost} found no host)`;
    add({
      name: `placement choose() p50 (${tag})`,
      denv: round(p.choose.p50),
      baseline: round(p.floor.p50),
      baselineName: "one-pass floor: online, labels, most free memory",
      unit: "µs",
      ratioKind: "denv/baseline",
      verdict: "info",
      note: `${shape}; mean ${p.choose.mean.toFixed(0)} µs, max ${p.choose.max.toFixed(0)} µs`,
    });
    add({
      name: `placement choose() p99 (${tag})`,
      denv: round(p.choose.p99),
      baseline: round(p.floor.p99),
      baselineName: "one-pass floor p99",
      unit: "µs",
      ratioKind: "denv/baseline",
      target: "<= 5 ms",
      verdict: verdict(p.choose.p99 <= 5000),
    });
    if (p.placer) {
      const pl = p.placer;
      const stag = `${tag}, ${pl.environments} envs, SQLite`;
      add({
        name: `Placer.place() p50 (${stag})`,
        denv: round(pl.latency.p50),
        baseline: round(p.choose.p50),
        baselineName: "choose() alone p50",
        unit: "µs",
        ratioKind: "denv/baseline",
        verdict: "info",
        note:
          `${pl.latency.n} calls, forks and labelled deploys in turn (${pl.noHost} found no host); the store holds ` +
          `${p.candidates} hosts, ${pl.environments} environments in ${pl.projects} projects, a version with 3 replicas ` +
          `(set up in ${pl.setupMs.toFixed(0)} ms)`,
      });
      add({
        name: `Placer.place() p99 (${stag})`,
        denv: round(pl.latency.p99),
        baseline: round(p.choose.p99),
        baselineName: "choose() alone p99",
        unit: "µs",
        ratioKind: "denv/baseline",
        verdict: "info",
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
