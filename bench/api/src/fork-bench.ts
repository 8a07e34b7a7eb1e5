import { performance } from "node:perf_hooks";
import type { Runtime } from "@denv/denvd";
import type { DenvClient } from "@denv/sdk";
import { settle } from "../../runtime/dist/host.js";
import { median } from "../../runtime/dist/stats.js";

/**
 * Benchmark 2: fork-to-ready through the API — `client.fork(env, {version}, {wait: true})`:
 * HTTP, a fork deployment in the cp (place, then env.fork on the host, phases streamed back),
 * the SDK following the deployment's log until it succeeded — versus the runtime alone: a
 * Runtime of its own host id (denvd as a library, no cp, no protocol) forking a snapshot of the
 * same small stack (2x debian sleep + a volume, no healthchecks). Alternating order (ABBA), a
 * `sync` and a pause before each; every fork is destroyed right after it is timed.
 */

export interface ForkRun {
  apiMs: number;
  runtimeMs: number;
  /** The API fork's deployment phases (cp: place; host: restore, start, health, probe), ms. */
  apiPhases: Record<string, number>;
  /** denvd's own timings of each fork (environment evidence). */
  apiHostTimings: Record<string, number>;
  runtimeTimings: Record<string, number>;
}

export interface ForkResult {
  apiVersion: string;
  runtimeVersion: string;
  runs: ForkRun[];
  medians: {
    apiMs: number;
    runtimeMs: number;
    ratio: number;
    apiHostTotalMs: number;
    runtimeTotalMs: number;
    phases: Record<string, number>;
  };
}

function timingsOf(evidence: unknown): Record<string, number> {
  const t = (evidence as { timings?: unknown } | undefined)?.timings;
  return t && typeof t === "object" ? (t as Record<string, number>) : {};
}

export async function forkBench(
  client: DenvClient,
  rt: Runtime,
  opts: {
    apiEnv: string;
    apiVersion: string;
    runtimeVersion: string;
    runs: number;
    warmup: number;
    check: () => void;
    log: (line: string) => void;
  },
): Promise<ForkResult> {
  const project = opts.apiEnv.split("/")[0] as string;
  const viaApi = async (name: string) => {
    await settle();
    const t0 = performance.now();
    const d = await client.fork(opts.apiEnv, { version: opts.apiVersion, name }, { wait: true });
    const ms = performance.now() - t0;
    if (d.status !== "succeeded") throw new Error(`API fork ${d.status}: ${d.error?.message ?? ""}`);
    const phases = Object.fromEntries(d.phases.map((p) => [p.name, p.duration_ms ?? Number.NaN]));
    const host = timingsOf((d.result as { evidence?: unknown } | undefined)?.evidence);
    const gone = await client.destroy(`${project}/${name}`, { wait: true });
    if (gone.status !== "succeeded")
      throw new Error(`destroy ${project}/${name}: ${gone.error?.message ?? ""}`);
    return { ms, phases, host };
  };
  const viaRuntime = async (name: string) => {
    await settle();
    const t0 = performance.now();
    const env = await rt.fork(opts.runtimeVersion, { name });
    const ms = performance.now() - t0;
    await rt.destroy(env.id);
    return { ms, timings: timingsOf(env.evidence) };
  };

  for (let i = 0; i < opts.warmup; i++) {
    await viaApi(`warm-api-${i}`);
    await viaRuntime(`warm-rt-${i}`);
  }
  const runs: ForkRun[] = [];
  for (let i = 0; i < opts.runs; i++) {
    opts.check();
    let api: Awaited<ReturnType<typeof viaApi>> | undefined;
    let runtime: Awaited<ReturnType<typeof viaRuntime>> | undefined;
    const apiFirst = i % 4 === 0 || i % 4 === 3;
    if (apiFirst) {
      api = await viaApi(`api-${i}`);
      runtime = await viaRuntime(`rt-${i}`);
    } else {
      runtime = await viaRuntime(`rt-${i}`);
      api = await viaApi(`api-${i}`);
    }
    runs.push({
      apiMs: api.ms,
      runtimeMs: runtime.ms,
      apiPhases: api.phases,
      apiHostTimings: api.host,
      runtimeTimings: runtime.timings,
    });
    opts.log(
      `fork ${i + 1}/${opts.runs}: API ${api.ms.toFixed(0)} ms (phases ${Object.entries(api.phases)
        .map(([k, v]) => `${k} ${v}`)
        .join(
          ", ",
        )}; denvd total ${api.host.total_ms}), runtime ${runtime.ms.toFixed(0)} ms (total ${runtime.timings.total_ms})`,
    );
  }
  const apiMs = median(runs.map((r) => r.apiMs));
  const runtimeMs = median(runs.map((r) => r.runtimeMs));
  const phaseNames = [...new Set(runs.flatMap((r) => Object.keys(r.apiPhases)))];
  return {
    apiVersion: opts.apiVersion,
    runtimeVersion: opts.runtimeVersion,
    runs,
    medians: {
      apiMs,
      runtimeMs,
      ratio: apiMs / runtimeMs,
      apiHostTotalMs: median(runs.map((r) => r.apiHostTimings.total_ms ?? Number.NaN)),
      runtimeTotalMs: median(runs.map((r) => r.runtimeTimings.total_ms ?? Number.NaN)),
      phases: Object.fromEntries(
        phaseNames.map((p) => [p, median(runs.map((r) => r.apiPhases[p] ?? Number.NaN))]),
      ),
    },
  };
}
