import { performance } from "node:perf_hooks";
import type { DenvClient } from "@denv/sdk";
import type Docker from "dockerode";
import { rawExec } from "../../runtime/dist/docker-raw.js";
import { run } from "../../runtime/dist/host.js";
import { median } from "../../runtime/dist/stats.js";
import { type Latency, latency } from "./numbers.js";

/**
 * Benchmark 1: one exec round trip through the whole of denv — SDK -> HTTP -> cp -> host stream
 * -> denvd -> Engine API -> container — versus `docker exec <container> true` spawned as a
 * process, as a user would type it, on the same container. A bare Engine API exec (dockerode:
 * create + start + inspect, bench/runtime's baseline) runs in the same rotation as context: it is
 * the floor both of them stand on. The order of the three rotates every iteration.
 */

export type ExecWay = "sdk" | "dockerCli" | "engineApi";

export interface ExecResult {
  container: string;
  pairs: number;
  warmup: number;
  ms: Record<ExecWay, number[]>;
  medians: Record<ExecWay, number>;
  latency: Record<ExecWay, Latency>;
  ratio: number;
}

const ORDERS: ExecWay[][] = [
  ["sdk", "dockerCli", "engineApi"],
  ["dockerCli", "engineApi", "sdk"],
  ["engineApi", "sdk", "dockerCli"],
  ["sdk", "engineApi", "dockerCli"],
  ["engineApi", "dockerCli", "sdk"],
  ["dockerCli", "sdk", "engineApi"],
];

export async function execBench(
  client: DenvClient,
  docker: Docker,
  opts: {
    env: string;
    containerId: string;
    agent: { user: string; workdir: string };
    pairs: number;
    warmup: number;
    check: () => void;
    log: (line: string) => void;
  },
): Promise<ExecResult> {
  const ways: Record<ExecWay, () => Promise<number>> = {
    sdk: async () => {
      const t0 = performance.now();
      const r = await client.exec(opts.env, { cmd: ["true"] });
      const ms = performance.now() - t0;
      if (r.exit_code !== 0) throw new Error(`denv exec true exited ${r.exit_code}: ${r.stderr}`);
      return ms;
    },
    dockerCli: async () => {
      const t0 = performance.now();
      const r = await run("docker", ["exec", opts.containerId, "true"]);
      const ms = performance.now() - t0;
      if (r.code !== 0) throw new Error(`docker exec true exited ${r.code}: ${r.stderr}`);
      return ms;
    },
    engineApi: async () => {
      const t0 = performance.now();
      const r = await rawExec(docker, opts.containerId, ["true"], {
        user: opts.agent.user,
        cwd: opts.agent.workdir,
      });
      const ms = performance.now() - t0;
      if (r.exitCode !== 0) throw new Error(`Engine API exec true exited ${r.exitCode}: ${r.stderr}`);
      return ms;
    },
  };
  for (let i = 0; i < opts.warmup; i++) for (const w of ORDERS[0] as ExecWay[]) await ways[w]();
  const ms: Record<ExecWay, number[]> = { sdk: [], dockerCli: [], engineApi: [] };
  for (let i = 0; i < opts.pairs; i++) {
    opts.check();
    for (const w of ORDERS[i % ORDERS.length] as ExecWay[]) ms[w].push(await ways[w]());
  }
  const medians = { sdk: median(ms.sdk), dockerCli: median(ms.dockerCli), engineApi: median(ms.engineApi) };
  opts.log(
    `exec true x${opts.pairs}: SDK ${medians.sdk.toFixed(1)} ms, docker exec CLI ${medians.dockerCli.toFixed(1)} ms, ` +
      `Engine API ${medians.engineApi.toFixed(1)} ms (medians)`,
  );
  return {
    container: opts.containerId,
    pairs: opts.pairs,
    warmup: opts.warmup,
    ms,
    medians,
    latency: { sdk: latency(ms.sdk), dockerCli: latency(ms.dockerCli), engineApi: latency(ms.engineApi) },
    ratio: medians.sdk / medians.dockerCli,
  };
}
