import { performance } from "node:perf_hooks";
import type { Runtime } from "@denv/denvd";
import type Docker from "dockerode";
import { rawExec } from "./docker-raw.js";
import { log } from "./host.js";
import { median } from "./stats.js";

/**
 * Benchmark 3: `rt.exec(env, {cmd: ["true"]})` versus a bare Engine API exec (create + start +
 * inspect) on the same container, as the same user in the same working directory. The two
 * alternate (ABBA) so that drift affects both alike.
 */

export interface ExecResult {
  container: string;
  iterations: number;
  warmup: number;
  denvMs: number[];
  rawMs: number[];
  medians: { denvMs: number; rawMs: number; ratio: number };
  /** First quartiles: less sensitive to the odd collision with a healthcheck or a daemon hiccup. */
  p25: { denvMs: number; rawMs: number };
}

function quantile(values: number[], q: number): number {
  const s = [...values].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(q * s.length))] ?? Number.NaN;
}

export async function execBench(
  rt: Runtime,
  docker: Docker,
  envId: string,
  opts: { iterations: number; warmup: number; check: () => void },
): Promise<ExecResult> {
  const rec = await rt.host.records.getEnvironment(envId);
  if (!rec) throw new Error(`no environment ${envId}`);
  const { service, user, workdir } = rec.plan.agent;
  const container = rec.containers[service];
  if (!container) throw new Error(`${envId} has no container for ${service}`);

  const viaDenv = async (): Promise<number> => {
    const t0 = performance.now();
    const r = await rt.exec(envId, { cmd: ["true"] });
    const ms = performance.now() - t0;
    if (r.exitCode !== 0) throw new Error(`denv exec true exited ${r.exitCode}: ${r.stderr.toString()}`);
    return ms;
  };
  const viaApi = async (): Promise<number> => {
    const t0 = performance.now();
    const r = await rawExec(docker, container, ["true"], { user, cwd: workdir });
    const ms = performance.now() - t0;
    if (r.exitCode !== 0) throw new Error(`raw exec true exited ${r.exitCode}: ${r.stderr}`);
    return ms;
  };

  for (let i = 0; i < opts.warmup; i++) {
    await viaDenv();
    await viaApi();
  }
  const denvMs: number[] = [];
  const rawMs: number[] = [];
  for (let i = 0; i < opts.iterations; i++) {
    opts.check();
    if (i % 2 === 0) {
      denvMs.push(await viaDenv());
      rawMs.push(await viaApi());
    } else {
      rawMs.push(await viaApi());
      denvMs.push(await viaDenv());
    }
  }
  const medians = { denvMs: median(denvMs), rawMs: median(rawMs), ratio: median(denvMs) / median(rawMs) };
  log(
    `exec ${envId}: denv ${medians.denvMs.toFixed(1)} ms, raw Engine API ${medians.rawMs.toFixed(1)} ms ` +
      `(${opts.iterations} each, interleaved)`,
  );
  const p25 = { denvMs: quantile(denvMs, 0.25), rawMs: quantile(rawMs, 0.25) };
  return { container, iterations: opts.iterations, warmup: opts.warmup, denvMs, rawMs, medians, p25 };
}
