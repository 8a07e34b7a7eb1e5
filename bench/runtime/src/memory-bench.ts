import { type ChildProcess, spawn } from "node:child_process";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import type { HostEnvironment, ResultFrame, Version } from "@denv/spec";
import { DENVD_MAIN, denvd, REPO, tarOf } from "../../../packages/denvd/dist/agent/testing/agent-harness.js";
import { FakeCp } from "../../../packages/denvd/dist/agent/testing/fake-cp.js";
import { memoryOf, sleep } from "./host.js";
import { median } from "./stats.js";

/**
 * Benchmark 4: resident memory of denvd itself. `denvd run` (dist/main.js, with the node options
 * deploy/denvd.service starts it with) is connected to a control plane (denvd's fake control
 * plane for its tests: the join route and the host stream), and measured idle and while holding
 * N environments; next to it, started at the same moment with the same node options, a bare
 * node process holding a WebSocket to a control plane of the same kind: what any sidecar
 * written in JavaScript pays. RSS from /proc/PID/status (VmRSS), sampled twice after hello: at
 * start-up (`startupMs`) and once V8 has had the time to give back what the start-up used
 * (`idleMs`).
 */

const MB = 1024 * 1024;

interface Sample {
  rssMb: number;
  hwmMb: number;
}

export interface MemoryResult {
  nodeOptions: string[];
  startupMs: number;
  idleMs: number;
  idleRuns: number;
  held: number;
  holdMs: number;
  /** Per run: the bare node process and denvd, at start-up and idle. */
  runs: Array<{ baseline: { startup: Sample; idle: Sample }; denvd: { startup: Sample; idle: Sample } }>;
  holding: { startup: Sample; idle: Sample } | undefined;
  medians: {
    baselineStartupMb: number;
    baselineIdleMb: number;
    denvdStartupMb: number;
    denvdIdleMb: number;
    denvdIdleHwmMb: number;
    holdingMb: number;
    holdingStartupMb: number;
    holdingHwmMb: number;
  };
}

/** The node options of the unit's ExecStart (`/usr/bin/env node OPTIONS... /usr/local/bin/denvd run`). */
async function unitNodeOptions(): Promise<string[]> {
  const unit = await readFile(join(REPO, "deploy/denvd.service"), "utf8");
  const words = /^ExecStart=(.*)$/m.exec(unit)?.[1]?.split(" ") ?? [];
  const node = words.indexOf("node");
  const binary = words.findIndex((w) => w.endsWith("/denvd"));
  return node >= 0 && binary > node ? words.slice(node + 1, binary) : [];
}

/** Median of a few RSS samples, taken 100 ms apart, and the peak so far. */
async function sample(pid: number, samples = 5): Promise<Sample> {
  const rss: number[] = [];
  let hwm = 0;
  for (let i = 0; i < samples; i++) {
    const m = await memoryOf(pid);
    rss.push(m.rss);
    hwm = Math.max(hwm, m.hwm);
    await sleep(100);
  }
  return { rssMb: median(rss) / MB, hwmMb: hwm / MB };
}

/** A process of the benchmark: stopped with SIGTERM (then SIGKILL) by its pid; its stderr kept. */
class Proc {
  private stderr = "";
  private readonly exited: Promise<void>;

  constructor(readonly child: ChildProcess) {
    child.stderr?.on("data", (b: Buffer) => {
      this.stderr = (this.stderr + b.toString()).slice(-4000);
    });
    this.exited = new Promise((r) => child.once("exit", () => r()));
  }

  get pid(): number {
    if (this.child.pid === undefined) throw new Error(`did not start:\n${this.stderr}`);
    return this.child.pid;
  }

  get log(): string {
    return this.stderr;
  }

  async stop(): Promise<void> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return;
    this.child.kill("SIGTERM");
    const killed = sleep(30_000).then(() => this.child.kill("SIGKILL"));
    await Promise.race([this.exited, killed]);
    await this.exited;
  }
}

const WS_HOLDER = `const WebSocket = require("ws");
const ws = new WebSocket(process.argv[1], { headers: { authorization: "Bearer " + process.argv[2] } });
ws.on("error", (err) => { console.error(err.message); process.exit(1); });
setInterval(() => {}, 1000);`;

function streamUrl(cp: FakeCp): string {
  return `${cp.url.replace(/^http/, "ws")}/v1/hosts/stream`;
}

async function result<T>(cp: FakeCp, id: string, what: string): Promise<T> {
  const r: ResultFrame = await cp.result(id, 600_000);
  if (!r.ok) throw new Error(`${what}: ${r.error?.code}: ${r.error?.message}`);
  return r.result as T;
}

/** Deploys the small stack once, snapshots it and forks it until denvd holds `n` environments. */
async function hold(cp: FakeCp, n: number, projectDir: string): Promise<number> {
  const deploy = cp.command("env.deploy", { project: "mem", environment: "e0", source_stream: "src" });
  await cp.write("src", await tarOf(projectDir, true), "file");
  const env = await result<HostEnvironment>(cp, deploy, "deploy");
  if (n <= 1) return 1;
  const version = await result<Version>(cp, cp.command("env.snapshot", { environment: env.id }), "snapshot");
  for (let i = 1; i < n; i++) {
    await result<HostEnvironment>(cp, cp.command("env.fork", { version: version.id, name: `e${i}` }), "fork");
  }
  return n;
}

export async function memoryBench(opts: {
  hostId: string;
  stateDir: string;
  smallDir: string;
  idleRuns: number;
  hold: number;
  startupMs: number;
  idleMs: number;
  log: (line: string) => void;
  check: () => void;
}): Promise<MemoryResult> {
  const nodeOptions = await unitNodeOptions();
  const cp = await FakeCp.start({ hostId: opts.hostId });
  const floorCp = await FakeCp.start();
  const runs: MemoryResult["runs"] = [];
  let holding: MemoryResult["holding"];
  let held = 0;
  let holdMs = 0;
  try {
    const joined = await denvd(["join", "--url", cp.url, "--token", cp.token, "--state-dir", opts.stateDir]);
    if (joined.code !== 0) throw new Error(`denvd join failed: ${joined.stderr}`);
    for (let i = 0; i < opts.idleRuns; i++) {
      opts.check();
      const from = cp.frames.length;
      const connections = floorCp.connections;
      const daemon = new Proc(
        spawn(process.execPath, [...nodeOptions, DENVD_MAIN, "run", "--state-dir", opts.stateDir], {
          cwd: REPO,
          env: { PATH: "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" },
          stdio: ["ignore", "ignore", "pipe"],
        }),
      );
      const floor = new Proc(
        spawn(process.execPath, [...nodeOptions, "-e", WS_HOLDER, streamUrl(floorCp), floorCp.credential], {
          cwd: REPO,
          stdio: ["ignore", "ignore", "pipe"],
        }),
      );
      try {
        await cp
          .waitFor((f) => f.type === "hello", 120_000, from)
          .catch((err: Error) => {
            throw new Error(`${err.message}; denvd's log:\n${daemon.log}`);
          });
        await floorCp.waitConnections(connections + 1);
        const t0 = Date.now();
        const at = async (ms: number) => {
          await sleep(Math.max(0, t0 + ms - Date.now()));
          const [b, d] = await Promise.all([sample(floor.pid), sample(daemon.pid)]);
          return { b, d };
        };
        const startup = await at(opts.startupMs);
        const idle = await at(opts.idleMs);
        runs.push({
          baseline: { startup: startup.b, idle: idle.b },
          denvd: { startup: startup.d, idle: idle.d },
        });
        opts.log(
          `memory ${i + 1}/${opts.idleRuns}: denvd ${startup.d.rssMb.toFixed(1)} MB at start-up, ` +
            `${idle.d.rssMb.toFixed(1)} MB idle (peak ${idle.d.hwmMb.toFixed(1)} MB); bare node + WebSocket ` +
            `${startup.b.rssMb.toFixed(1)} / ${idle.b.rssMb.toFixed(1)} MB`,
        );
        if (i === opts.idleRuns - 1 && opts.hold > 0) {
          await floor.stop();
          const started = Date.now();
          held = await hold(cp, opts.hold, opts.smallDir);
          holdMs = Date.now() - started;
          const t1 = Date.now();
          await sleep(Math.max(0, t1 + opts.startupMs - Date.now()));
          const first = await sample(daemon.pid);
          await sleep(Math.max(0, t1 + opts.idleMs - Date.now()));
          holding = { startup: first, idle: await sample(daemon.pid) };
          opts.log(
            `memory: holding ${held} environments ${holding.idle.rssMb.toFixed(1)} MB ` +
              `(${first.rssMb.toFixed(1)} MB right after; peak ${holding.idle.hwmMb.toFixed(1)} MB; ` +
              `deploy + snapshot + ${held - 1} forks took ${holdMs} ms)`,
          );
        }
      } finally {
        await Promise.all([daemon.stop(), floor.stop()]);
      }
    }
  } finally {
    await cp.close();
    await floorCp.close();
  }
  const m = (f: (r: MemoryResult["runs"][number]) => number) => median(runs.map(f));
  return {
    nodeOptions,
    startupMs: opts.startupMs,
    idleMs: opts.idleMs,
    idleRuns: opts.idleRuns,
    held,
    holdMs,
    runs,
    holding,
    medians: {
      baselineStartupMb: m((r) => r.baseline.startup.rssMb),
      baselineIdleMb: m((r) => r.baseline.idle.rssMb),
      denvdStartupMb: m((r) => r.denvd.startup.rssMb),
      denvdIdleMb: m((r) => r.denvd.idle.rssMb),
      denvdIdleHwmMb: m((r) => r.denvd.idle.hwmMb),
      holdingMb: holding?.idle.rssMb ?? Number.NaN,
      holdingStartupMb: holding?.startup.rssMb ?? Number.NaN,
      holdingHwmMb: holding?.idle.hwmMb ?? Number.NaN,
    },
  };
}
