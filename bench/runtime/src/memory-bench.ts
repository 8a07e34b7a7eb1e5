import { type ChildProcess, fork, spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { memoryOf, sleep } from "./host.js";
import type { ChildReply, ChildRequest } from "./memory-child.js";
import { median } from "./stats.js";

/**
 * Benchmark 4: resident memory of a process that holds an open Runtime (what denvd costs a
 * host), idle and while holding N environments, next to a bare `node -e setInterval` for
 * context. RSS from /proc/PID/status (VmRSS), sampled after the process settled.
 */

const MB = 1024 * 1024;

export interface MemoryResult {
  idleRuns: number;
  held: number;
  nodeRssMb: number[];
  denvIdleRssMb: number[];
  denvIdleHwmMb: number[];
  denvHoldingRssMb: number;
  denvHoldingHwmMb: number;
  holdMs: number;
  openMs: number[];
  medians: { nodeRssMb: number; denvIdleRssMb: number; denvHoldingRssMb: number };
}

/** Median of a few RSS samples, taken 100 ms apart. */
async function sampleRss(pid: number, samples = 5): Promise<{ rss: number; hwm: number }> {
  const rss: number[] = [];
  let hwm = 0;
  for (let i = 0; i < samples; i++) {
    const m = await memoryOf(pid);
    rss.push(m.rss);
    hwm = Math.max(hwm, m.hwm);
    await sleep(100);
  }
  return { rss: median(rss) / MB, hwm: hwm / MB };
}

async function bareNode(settleMs: number): Promise<number> {
  const child = spawn(process.execPath, ["-e", "setInterval(()=>{},1000)"], { stdio: "ignore" });
  try {
    await sleep(settleMs);
    if (child.pid === undefined) throw new Error("node did not start");
    return (await sampleRss(child.pid)).rss;
  } finally {
    child.kill("SIGKILL");
  }
}

class Child {
  private readonly proc: ChildProcess;
  private readonly replies: ChildReply[] = [];
  private waiters: Array<() => void> = [];
  private exited = false;

  constructor(hostId: string, stateDir: string) {
    const script = fileURLToPath(new URL("./memory-child.js", import.meta.url));
    this.proc = fork(script, [], {
      env: { ...process.env, BENCH_HOST_ID: hostId, BENCH_STATE_DIR: stateDir },
      stdio: ["ignore", "inherit", "inherit", "ipc"],
    });
    this.proc.on("message", (m: ChildReply) => {
      this.replies.push(m);
      for (const w of this.waiters.splice(0)) w();
    });
    this.proc.on("exit", () => {
      this.exited = true;
      for (const w of this.waiters.splice(0)) w();
    });
  }

  get pid(): number {
    return this.proc.pid ?? 0;
  }

  async next<T extends ChildReply["type"]>(
    type: T,
    timeoutMs: number,
  ): Promise<Extract<ChildReply, { type: T }>> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const i = this.replies.findIndex((r) => r.type === type || r.type === "error");
      if (i >= 0) {
        const [r] = this.replies.splice(i, 1);
        if (r?.type === "error") throw new Error(`memory child: ${r.message}`);
        return r as Extract<ChildReply, { type: T }>;
      }
      if (this.exited) throw new Error(`memory child exited before '${type}'`);
      if (Date.now() > deadline) throw new Error(`memory child: no '${type}' after ${timeoutMs} ms`);
      await new Promise<void>((resolve) => {
        this.waiters.push(resolve);
        setTimeout(resolve, 1000);
      });
    }
  }

  send(m: ChildRequest): void {
    this.proc.send(m);
  }

  /** Asks it to clean up and exit; kills it (by its pid) only if it does not. */
  async close(): Promise<string[]> {
    if (this.exited) return [];
    this.send({ cmd: "close" });
    try {
      return (await this.next("closed", 120_000)).problems;
    } catch (err) {
      this.proc.kill("SIGTERM");
      return [(err as Error).message];
    } finally {
      for (let i = 0; i < 100 && !this.exited; i++) await sleep(50);
    }
  }
}

export async function memoryBench(opts: {
  hostId: string;
  stateDir: string;
  smallDir: string;
  idleRuns: number;
  hold: number;
  settleMs: number;
  log: (line: string) => void;
  check: () => void;
}): Promise<MemoryResult & { problems: string[] }> {
  const nodeRssMb: number[] = [];
  const denvIdleRssMb: number[] = [];
  const denvIdleHwmMb: number[] = [];
  const openMs: number[] = [];
  const problems: string[] = [];
  let holding = { rss: Number.NaN, hwm: Number.NaN };
  let holdMs = 0;
  let held = 0;
  for (let i = 0; i < opts.idleRuns; i++) {
    opts.check();
    nodeRssMb.push(await bareNode(opts.settleMs));
    const child = new Child(opts.hostId, opts.stateDir);
    try {
      const ready = await child.next("ready", 120_000);
      openMs.push(ready.openMs);
      await sleep(opts.settleMs);
      const idle = await sampleRss(child.pid);
      denvIdleRssMb.push(idle.rss);
      denvIdleHwmMb.push(idle.hwm);
      opts.log(
        `memory ${i + 1}/${opts.idleRuns}: bare node ${nodeRssMb.at(-1)?.toFixed(1)} MB, ` +
          `denv runtime idle ${idle.rss.toFixed(1)} MB (peak ${idle.hwm.toFixed(1)} MB, open ${ready.openMs} ms)`,
      );
      if (i === opts.idleRuns - 1 && opts.hold > 0) {
        child.send({ cmd: "hold", n: opts.hold, projectDir: opts.smallDir });
        const h = await child.next("held", 600_000);
        held = h.n;
        holdMs = h.ms;
        await sleep(opts.settleMs);
        holding = await sampleRss(child.pid);
        opts.log(
          `memory: holding ${h.n} environments ${holding.rss.toFixed(1)} MB (peak ${holding.hwm.toFixed(1)} MB; ` +
            `deploy + snapshot + ${h.n - 1} forks took ${h.ms} ms)`,
        );
      }
    } finally {
      problems.push(...(await child.close()));
    }
  }
  return {
    idleRuns: opts.idleRuns,
    held,
    nodeRssMb,
    denvIdleRssMb,
    denvIdleHwmMb,
    denvHoldingRssMb: holding.rss,
    denvHoldingHwmMb: holding.hwm,
    holdMs,
    openMs,
    medians: {
      nodeRssMb: median(nodeRssMb),
      denvIdleRssMb: median(denvIdleRssMb),
      denvHoldingRssMb: holding.rss,
    },
    problems,
  };
}
