import { type ChildProcess, spawn } from "node:child_process";
import { closeSync, openSync } from "node:fs";
import { mkdir, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { isIP } from "node:net";
import { join } from "node:path";
import { DenvError } from "@denv/spec";
import type { Log } from "../log.js";
import type { TargetRecord } from "../store/records.js";
import {
  credential,
  type MachineProvider,
  type MachineSettings,
  type ProviderMachine,
  type ProvisionDeps,
  ProvisionedDriver,
} from "./provisioned-driver.js";

/** The hosted kinds denvd bridges to, with the provider's name. */
export const BRIDGE_PROVIDERS = { e2b: "E2B", daytona: "Daytona", prime: "Prime", modal: "Modal" } as const;
export type BridgeKind = keyof typeof BRIDGE_PROVIDERS;

/**
 * A hosted target (a sandbox provider) reached through a bridge: a denvd on the control plane's
 * own machine, run with `--provider`, whose environments are the provider's sandboxes (denvd's
 * provider runtime; packages/denvd/README.md). To the provisioned driver a bridge is a machine:
 * created with a single-use join token when the target is added (min 1, max 1), reconciled,
 * deleted with the target. The target's API key reaches the bridge in its environment only.
 * (Modal's `base_url` is its server, which its SDK reads from MODAL_SERVER_URL: the bridge gets it
 * as DENVD_PROVIDER_API_URL like the others' and sets that in its own process.)
 */
export class BridgeDriver extends ProvisionedDriver {
  constructor(
    private readonly providerKind: BridgeKind,
    deps: ProvisionDeps,
    private readonly bridges: BridgeProcesses,
  ) {
    super(providerKind, deps);
  }

  protected provider(target: TargetRecord, credentials: Record<string, string>): MachineProvider {
    const s = target.settings as { base_url?: string; sandbox_url?: string; canaries?: string[] };
    // The egress probe's canaries: the control plane itself (a listener denv runs), and the target's.
    const own = this.bridges.ownAddress();
    const canaries = [...(own ? [own] : []), ...(s.canaries ?? [])];
    return this.bridges.provider(target.name, {
      DENVD_PROVIDER: this.providerKind,
      DENVD_PROVIDER_API_KEY: this.apiKey(target, credentials),
      ...(s.base_url ? { DENVD_PROVIDER_API_URL: s.base_url } : {}),
      ...(s.sandbox_url ? { DENVD_PROVIDER_SANDBOX_URL: s.sandbox_url } : {}),
      ...(canaries.length > 0 ? { DENVD_PROVIDER_CANARIES: canaries.join(",") } : {}),
    });
  }

  /** The bridge's key at its provider: Modal's is its token, id and secret joined by a colon. */
  private apiKey(target: TargetRecord, credentials: Record<string, string>): string {
    if (this.providerKind !== "modal") return credential(target, credentials, "api_key");
    return `${credential(target, credentials, "token_id")}:${credential(target, credentials, "token_secret")}`;
  }

  protected costClass(): string {
    return `${this.providerKind}/bridge (sandboxes billed by ${BRIDGE_PROVIDERS[this.providerKind]})`;
  }

  /** One bridge per target, always: it is a process, not a machine that costs while idle. */
  protected override machineSettings(): MachineSettings {
    return { min_machines: 1, max_machines: 1, idle_shutdown_minutes: 0, labels: {} };
  }
}

interface BridgeFile {
  machine: string;
  target: string;
  labels: Record<string, string>;
}

/**
 * The bridge processes of this control plane, one folder each under `dir`: `bridge.json` (what
 * it is), `state/` (denvd's state: host.json, its journal, its records of the provider's
 * sandboxes), `denvd.log` and `pid`. A bridge that is not running when its target is listed (it
 * crashed, or the control plane stopped it) is started again on the same state: the same host,
 * holding the same sandboxes; one that a control plane which crashed left running is adopted by
 * its pid, never started twice. close() stops them all and keeps their folders.
 */
export class BridgeProcesses {
  /** Bridges this control plane started, and those a previous one left running (adopted by pid). */
  private readonly running = new Map<string, ChildProcess | number>();

  constructor(
    private readonly o: {
      dir: string;
      /** The denvd bundle this control plane serves (install-assets.ts). */
      bundle: string;
      /** This control plane on this machine (a bridge dials it on loopback). */
      cpUrl: () => string;
      log: Log;
    },
  ) {}

  provider(target: string, env: Record<string, string>): MachineProvider {
    return {
      list: (labels) => this.list(target, labels, env),
      create: async (req) => this.create(target, req, env),
      delete: (machine) => this.remove(machine, env),
    };
  }

  /** This control plane's address as IP:PORT, when it listens on one (an egress canary). */
  ownAddress(): string | undefined {
    const u = this.o.cpUrl();
    if (!u) return undefined;
    const { hostname, port } = new URL(u);
    return isIP(hostname.replace(/^\[|\]$/g, "")) && port ? `${hostname}:${port}` : undefined;
  }

  async close(): Promise<void> {
    await Promise.all([...this.running.keys()].map((m) => this.stop(m)));
  }

  private async list(
    target: string,
    labels: Record<string, string>,
    env: Record<string, string>,
  ): Promise<ProviderMachine[]> {
    const found: ProviderMachine[] = [];
    for (const b of await this.files()) {
      if (b.target !== target || !Object.entries(labels).every(([k, v]) => b.labels[k] === v)) continue;
      if (!this.running.has(b.machine)) {
        const left = await this.leftRunning(b.machine);
        if (left === undefined) this.start(b.machine, env);
        else this.running.set(b.machine, left);
      }
      found.push({ providerId: b.machine, machine: b.machine });
    }
    return found;
  }

  private async create(
    target: string,
    req: Parameters<MachineProvider["create"]>[0],
    env: Record<string, string>,
  ): Promise<ProviderMachine> {
    const dir = join(this.o.dir, req.machine);
    await mkdir(dir, { recursive: true, mode: 0o700 });
    const file: BridgeFile = { machine: req.machine, target, labels: req.labels };
    await writeFile(join(dir, "bridge.json"), JSON.stringify(file), { mode: 0o600 });
    const hostLabels = Object.entries({ ...req.labels, "ai.denv.machine": req.machine }).flatMap(([k, v]) => [
      "--label",
      `${k}=${v}`,
    ]);
    const joined = await this.denvd(
      [
        "join",
        "--url",
        this.o.cpUrl(),
        "--token",
        req.joinToken,
        "--name",
        req.machine,
        "--state-dir",
        join(dir, "state"),
        ...hostLabels,
      ],
      {},
    );
    if (joined.code !== 0) {
      await rm(dir, { recursive: true, force: true });
      throw new DenvError("internal", `bridge ${req.machine} could not join: ${joined.stderr.trim()}`);
    }
    this.start(req.machine, env);
    return { providerId: req.machine, machine: req.machine };
  }

  /**
   * Stops the bridge, then has it give back at the provider everything it made (`denvd release`:
   * sandboxes, snapshots, templates), and only then removes its folder. A release that fails
   * keeps the folder and throws: the bridge comes back at the next reconcile, holding what it
   * held, and the removal can be asked again.
   */
  private async remove(machine: string, env: Record<string, string>): Promise<void> {
    await this.stop(machine);
    const dir = join(this.o.dir, machine);
    const released = await this.denvd(["release", "--state-dir", join(dir, "state")], env);
    // A plain error: the target service answers it as the target not removed, with this reason.
    if (released.code !== 0) {
      throw new Error(
        `bridge ${machine} could not remove what it holds at the provider: ${released.stderr.trim()}`,
      );
    }
    this.o.log.info("bridge released", { machine });
    await rm(dir, { recursive: true, force: true });
  }

  private start(machine: string, env: Record<string, string>): void {
    const dir = join(this.o.dir, machine);
    // Its log is a file it holds itself, not a pipe through this process: a bridge outlives a
    // control plane that crashed (and is adopted by the next one) instead of dying on a broken pipe.
    const log = openSync(join(dir, "denvd.log"), "a", 0o600);
    const child = spawn(process.execPath, [this.o.bundle, "run", "--state-dir", join(dir, "state")], {
      env: { PATH: process.env.PATH ?? "/usr/bin:/bin", ...env },
      stdio: ["ignore", "ignore", log],
    });
    closeSync(log);
    child.once("exit", (code, signal) => {
      if (this.running.get(machine) === child) this.running.delete(machine);
      this.o.log.info("bridge exited", { machine, code, signal });
    });
    if (child.pid !== undefined) void writeFile(join(dir, "pid"), String(child.pid)).catch(() => undefined);
    this.running.set(machine, child);
    this.o.log.info("bridge started", { machine, pid: child.pid });
  }

  private async stop(machine: string): Promise<void> {
    const child = this.running.get(machine);
    if (typeof child === "number") {
      this.running.delete(machine);
      await stopPid(child, () => this.isBridge(machine, child));
      return;
    }
    if (!child || child.exitCode !== null) return;
    const exited = new Promise((r) => child.once("exit", r));
    child.kill("SIGTERM");
    const timer = setTimeout(() => child.kill("SIGKILL"), 10_000);
    await exited;
    clearTimeout(timer);
  }

  /** The pid of this machine's bridge when a previous control plane left it running. */
  private async leftRunning(machine: string): Promise<number | undefined> {
    const dir = join(this.o.dir, machine);
    const pid = Number(await readFile(join(dir, "pid"), "utf8").catch(() => ""));
    if (!Number.isInteger(pid) || pid <= 0) return undefined;
    return (await this.isBridge(machine, pid)) ? pid : undefined;
  }

  /** Whether `pid` is, now, this machine's bridge: a pid the kernel gave to another process since is left alone. */
  private async isBridge(machine: string, pid: number): Promise<boolean> {
    const cmdline = await readFile(`/proc/${pid}/cmdline`, "utf8").catch(() => "");
    return cmdline.split("\0").includes(join(this.o.dir, machine, "state"));
  }

  private async files(): Promise<BridgeFile[]> {
    const names = await readdir(this.o.dir).catch(() => [] as string[]);
    const out: BridgeFile[] = [];
    for (const n of names) {
      const raw = await readFile(join(this.o.dir, n, "bridge.json"), "utf8").catch(() => undefined);
      if (raw) out.push(JSON.parse(raw) as BridgeFile);
    }
    return out;
  }

  private denvd(args: string[], env: Record<string, string>): Promise<{ code: number; stderr: string }> {
    return new Promise((resolve) => {
      const child = spawn(process.execPath, [this.o.bundle, ...args], {
        env: { PATH: process.env.PATH ?? "/usr/bin:/bin", ...env },
        stdio: ["ignore", "ignore", "pipe"],
      });
      let stderr = "";
      child.stderr?.on("data", (b: Buffer) => {
        stderr += b.toString();
      });
      child.once("error", (err) => resolve({ code: 1, stderr: err.message }));
      child.once("exit", (code) => resolve({ code: code ?? 1, stderr }));
    });
  }
}

/**
 * SIGTERM, then SIGKILL after 10 s, to a process this control plane did not start; each signal
 * only while `isOurs` still says the pid is that process (once it exits, its pid can go to any).
 */
async function stopPid(pid: number, isOurs: () => Promise<boolean>): Promise<void> {
  if (!(await isOurs())) return;
  process.kill(pid, "SIGTERM");
  for (const until = Date.now() + 10_000; (await isOurs()) && Date.now() < until; ) {
    await new Promise((r) => setTimeout(r, 100));
  }
  if (await isOurs()) process.kill(pid, "SIGKILL");
}
