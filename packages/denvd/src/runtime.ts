import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdir, readFile, rm } from "node:fs/promises";
import { join, resolve } from "node:path";
import type { Readable } from "node:stream";
import {
  checkName,
  DenvError,
  ExitCodes,
  Labels,
  labelsFor,
  type Plan,
  Protection,
  type Role,
  type ServicePlan,
} from "@denv/spec";
import { containerSpec, isProtected } from "./container-spec.js";
import { DockerClient, type ImageInfo } from "./docker/docker-client.js";
import { type RawExecResult, type RunExecOptions, runExec } from "./exec-runner.js";
import {
  type FilesTarget,
  getFiles,
  putFiles,
  readFile as readOneFile,
  writeFile as writeOneFile,
} from "./files-api.js";
import { Canary } from "./host/canary.js";
import { rejectToHost, removeRejectRule, ruleNetworkIds } from "./host/firewall.js";
import { removeDefaultRoute } from "./host/netns.js";
import { killAll } from "./host/proc-tree.js";
import { run } from "./host/run.js";
import { type ProbeResult, probeEgress } from "./probe.js";
import { loadPlan } from "./project-loader.js";
import { type EnvironmentRecord, type ImageRecord, RecordStore, type VersionRecord } from "./records.js";
import { snapshotEnvironment } from "./snapshotter.js";
import { type VerifyResult, verifyEnvironment } from "./verifier.js";
import { openVolumeStore, type VolumeStore } from "./volume-store.js";

export interface RuntimeOptions {
  /** This host's id: everything it creates is labelled with it, and it collects only its own. */
  hostId: string;
  /** Where records, the volume store and tests archives live. */
  stateDir: string;
  dockerSocket?: string;
  /** Volume store: "auto" (btrfs loop file, else plain copies), "btrfs" or "copy". */
  storeMethod?: "auto" | "btrfs" | "copy";
  storeLoopBytes?: number;
  /** Environment networks are /24s carved from this /16 (keeps clear of Docker's own pools). */
  subnetPool?: string;
  /** Commit chains longer than this many layers are squashed into one (overlay2 stops near 128). */
  squashThreshold?: number;
  /** How long services may take to become healthy. */
  healthTimeoutMs?: number;
  canaryPort?: number;
  log?: (line: string) => void;
  /** Called after services started and before the egress probe (tests use it to create leaks). */
  beforeProbe?: (env: EnvironmentRecord) => Promise<void>;
}

export interface EnvironmentInfo {
  id: string;
  project: string;
  name: string;
  status: EnvironmentRecord["status"];
  parentVersion?: string;
  agent: Plan["agent"];
  services: Array<{ name: string; containerId: string; image: string; imageId: string }>;
  network: EnvironmentRecord["network"];
  evidence: Record<string, unknown>;
}

export interface VersionInfo {
  id: string;
  project: string;
  number: number;
  sourceEnvironment: string;
  parentVersion?: string;
  method: VersionRecord["method"];
  timings: VersionRecord["timings"];
  sizes: VersionRecord["sizes"];
  images: VersionRecord["images"];
  volumes: VersionRecord["volumes"];
  createdAt: string;
}

export interface DeployRequest {
  project: string;
  environment?: string;
  projectDir: string;
  composeFile?: string;
  /** A plan validated elsewhere; otherwise the project's compose file is read. */
  plan?: Plan;
  /** Variables for compose interpolation (default: this process's environment). */
  env?: Record<string, string | undefined>;
  /** Id of the command that asked (labels what it creates). */
  command?: string;
  onPhase?: PhaseListener;
}

/** Told when a phase of an operation starts (names from spec's Phases), with its evidence when it ends. */
export type PhaseListener = (phase: string, evidence?: Record<string, unknown>) => void;

export interface ExecOptions {
  cmd?: string[];
  shell?: string;
  service?: string;
  user?: string;
  cwd?: string;
  env?: Record<string, string>;
  stdin?: Buffer | Readable;
  /** Seconds. */
  timeout?: number;
  tty?: boolean;
  outputLimit?: number;
  onStdout?: (chunk: Buffer) => void;
  onStderr?: (chunk: Buffer) => void;
  /** Back-pressure for streaming callers (see RunExecOptions.onFlow). */
  onFlow?: RunExecOptions["onFlow"];
  /** false: output is only streamed, not kept in the result. */
  collect?: boolean;
  /** Aborting kills the exec's process tree. */
  signal?: AbortSignal;
}

const DEFAULTS = {
  storeMethod: "auto" as const,
  storeLoopBytes: 64 * 1024 ** 3,
  subnetPool: "10.213.0.0/16",
  squashThreshold: 100,
  healthTimeoutMs: 120_000,
};

function newId(): string {
  return randomBytes(4).toString("hex");
}

/** Undo steps of an operation in progress, run newest first when it fails. */
class Undo {
  private steps: Array<() => Promise<unknown>> = [];
  push(step: () => Promise<unknown>): void {
    this.steps.push(step);
  }
  async run(): Promise<void> {
    for (const step of this.steps.reverse()) await step().catch(() => undefined);
    this.steps = [];
  }
}

/** One async lock per key: lifecycle operations on an environment do not interleave. */
class Locks {
  private tails = new Map<string, Promise<unknown>>();
  async with<T>(key: string, fn: () => Promise<T>): Promise<T> {
    const prev = this.tails.get(key) ?? Promise.resolve();
    const next = prev.then(fn, fn);
    const tail = next.catch(() => undefined);
    this.tails.set(key, tail);
    try {
      return await next;
    } finally {
      if (this.tails.get(key) === tail) this.tails.delete(key);
    }
  }
}

async function startTime(pid: number): Promise<number> {
  try {
    const stat = await readFile(`/proc/${pid}/stat`, "utf8");
    return Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[19]);
  } catch {
    return -1;
  }
}

function isRootUser(user: string): boolean {
  const name = user.split(":")[0] ?? "";
  return name === "root" || name === "0";
}

function chownSpec(user: string): string {
  if (user.includes(":")) return user;
  return /^\d+$/.test(user) ? `${user}:${user}` : `${user}:`;
}

/**
 * One host's runtime: stands compose environments up on the local Docker Engine with the five
 * protections, snapshots them consistently and forks them. The control plane drives it through
 * denvd's stream; tests and benchmarks drive it as a library.
 */
export class Runtime {
  readonly docker: DockerClient;
  readonly records: RecordStore;
  readonly canary = new Canary();
  readonly options: Required<Omit<RuntimeOptions, "dockerSocket" | "canaryPort" | "log" | "beforeProbe">> &
    RuntimeOptions;
  store!: VolumeStore;
  private locks = new Locks();
  private netLock = new Locks();

  private constructor(options: RuntimeOptions) {
    this.options = { ...DEFAULTS, ...options };
    this.docker = new DockerClient(options.dockerSocket);
    this.records = new RecordStore(join(options.stateDir, "records"));
  }

  /** Connects to Docker, opens the volume store and collects what this host no longer owns. */
  static async open(options: RuntimeOptions): Promise<Runtime> {
    checkName("project", options.hostId);
    const rt = new Runtime(options);
    await rt.docker.ping();
    await mkdir(join(options.stateDir, "tests"), { recursive: true, mode: 0o700 });
    await rt.records.init();
    rt.store = await openVolumeStore({
      dir: join(options.stateDir, "store"),
      method: rt.options.storeMethod,
      loopSizeBytes: rt.options.storeLoopBytes,
    });
    await rt.canary.listen(options.canaryPort ?? 0);
    await rt.gc();
    await rt.watchRestarts();
    return rt;
  }

  async close(): Promise<void> {
    this.events?.destroy();
    await this.canary.close();
  }

  private events: (NodeJS.ReadableStream & { destroy(): void }) | undefined;

  /**
   * A service that Docker restarts (restart policy) gets a new network namespace, with a
   * default route again: take it away as soon as the engine reports the start.
   */
  private async watchRestarts(): Promise<void> {
    const stream = (await this.docker.api.getEvents({
      filters: { type: ["container"], event: ["start"], label: [`${Labels.host}=${this.options.hostId}`] },
    })) as NodeJS.ReadableStream & { destroy(): void };
    this.events = stream;
    let buf = "";
    stream.on("data", (chunk: Buffer) => {
      buf += chunk.toString("utf8");
      let nl = buf.indexOf("\n");
      while (nl >= 0) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        nl = buf.indexOf("\n");
        void this.onContainerStart(line).catch((err: Error) => this.log(`restart watch: ${err.message}`));
      }
    });
    stream.on("error", () => undefined);
  }

  private async onContainerStart(line: string): Promise<void> {
    const ev = JSON.parse(line) as { id?: string; Actor?: { Attributes?: Record<string, string> } };
    const envId = ev.Actor?.Attributes?.[Labels.environment];
    if (!ev.id || !envId) return;
    const rec = await this.records.getEnvironment(envId);
    if (rec?.plan.egress !== "deny") return;
    const state = await this.docker.inspect(ev.id);
    if (state?.running && state.pid > 0 && state.hostConfig.networkMode !== "none")
      await removeDefaultRoute(state.pid);
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  log(line: string): void {
    this.options.log?.(line);
  }

  labels(
    env: { project: string; id: string },
    role: Role,
    command: string,
    extra: { version?: string; service?: string; volume?: string } = {},
  ): Record<string, string> {
    return labelsFor({
      host: this.options.hostId,
      project: env.project,
      environment: env.id,
      role,
      command,
      ...extra,
    });
  }

  dockerName(project: string, env: string, suffix?: string): string {
    return `denv-${this.options.hostId}-${project}-${env}${suffix ? `-${suffix}` : ""}`;
  }

  // ---------------------------------------------------------------- deploy and fork

  /** Builds the project's images, then stands a fresh environment up (PROJECT/ENV, alpha by default). */
  async deploy(req: DeployRequest): Promise<EnvironmentInfo> {
    const project = checkName("project", req.project);
    const name = checkName("environment", req.environment ?? "alpha");
    const id = `${project}/${name}`;
    const command = req.command ?? `deploy-${newId()}`;
    const projectDir = resolve(req.projectDir);
    const phase = req.onPhase ?? (() => undefined);
    phase("validate");
    const plan =
      req.plan ??
      loadPlan(projectDir, {
        projectName: project,
        ...(req.composeFile ? { composeFile: req.composeFile } : {}),
        ...(req.env ? { env: req.env } : {}),
      }).plan;
    return this.locks.with(id, async () => {
      if (await this.records.getEnvironment(id)) {
        throw new DenvError(
          "conflict",
          `environment ${id} exists: destroy it first, or deploy under another name`,
        );
      }
      const undo = new Undo();
      try {
        phase("build");
        const images: Record<string, ImageRecord> = {};
        for (const svc of plan.services) {
          images[svc.name] = await this.ensureImage(svc.image, svc.build, projectDir);
        }
        const verifierImage = plan.verifier
          ? await this.ensureImage(plan.verifier.image, plan.verifier.build, projectDir)
          : undefined;
        let testsTar: string | undefined;
        if (plan.verifier?.tests) {
          testsTar = join(this.options.stateDir, "tests", `${project}-${newId()}.tar`);
          await tarDirectory(join(projectDir, plan.verifier.tests), testsTar);
          const file = testsTar;
          undo.push(() => rm(file, { force: true }));
        }
        const rec = await this.materialize(
          {
            id,
            project,
            name,
            plan,
            command,
            images,
            ...(verifierImage ? { verifierImage } : {}),
            ...(testsTar ? { testsTar } : {}),
          },
          undefined,
          undo,
          phase,
        );
        return this.info(rec);
      } catch (err) {
        await undo.run();
        throw err;
      }
    });
  }

  /** A new environment from a version: its services start fresh from the version's disk state. */
  async fork(
    versionId: string,
    opts: { name?: string; command?: string; onPhase?: PhaseListener } = {},
  ): Promise<EnvironmentInfo> {
    const version = await this.requireVersion(versionId);
    const name = checkName("environment", opts.name ?? `fork-${newId()}`);
    const id = `${version.project}/${name}`;
    return this.locks.with(id, async () => {
      if (await this.records.getEnvironment(id)) {
        throw new DenvError("conflict", `environment ${id} exists: choose another fork name`);
      }
      const undo = new Undo();
      try {
        const rec = await this.materialize(
          {
            id,
            project: version.project,
            name,
            plan: version.plan,
            command: opts.command ?? `fork-${newId()}`,
            images: version.images,
            parentVersion: version.id,
            ...(version.verifierImage ? { verifierImage: version.verifierImage } : {}),
            ...(version.testsTar ? { testsTar: version.testsTar } : {}),
          },
          version,
          undo,
          opts.onPhase ?? (() => undefined),
        );
        return this.info(rec);
      } catch (err) {
        await undo.run();
        throw err;
      }
    });
  }

  private async ensureImage(
    image: string,
    build: ServicePlan["build"],
    projectDir: string,
  ): Promise<ImageRecord> {
    if (build) {
      const context = resolve(projectDir, build.context);
      this.log(`build ${image} from ${build.context}`);
      const tar = spawn("tar", ["-C", context, "-cf", "-", "."], { stdio: ["ignore", "pipe", "inherit"] });
      const imageId = await this.docker.build(
        tar.stdout,
        {
          tag: image,
          dockerfile: build.dockerfile,
          args: build.args,
          ...(build.target ? { target: build.target } : {}),
          // No project label: projects deploying the same compose file share the tag, and an
          // identical build must give an identical image instead of leaving the old one dangling.
          labels: { [Labels.managed]: "true" },
        },
        (line) => this.log(line.trimEnd()),
      );
      const info = (await this.docker.imageInfo(imageId)) as ImageInfo;
      return { image, imageId, repoDigests: info.repoDigests, layers: info.layers };
    }
    const info = await this.docker.imageInfo(image);
    if (!info) {
      throw new DenvError(
        "not_found",
        `image '${image}' is not on this host: build it here, or give the service a build: section`,
      );
    }
    return { image, imageId: info.id, repoDigests: info.repoDigests, layers: info.layers };
  }

  private async allocateSubnet(): Promise<{ subnet: string; gateway: string }> {
    const [a, b] = this.options.subnetPool.split(".");
    const used = new Set(await this.docker.usedSubnets());
    for (let c = 0; c < 256; c++) {
      const subnet = `${a}.${b}.${c}.0/24`;
      if (!used.has(subnet)) return { subnet, gateway: `${a}.${b}.${c}.1` };
    }
    throw new DenvError("conflict", `no free /24 left in the subnet pool ${this.options.subnetPool}`);
  }

  /**
   * Network, volumes, containers in dependency order, health, protections, probe. Used by deploy
   * (fresh volumes) and fork (volumes cloned from a version). Whatever it created is undone by
   * the caller's `undo` on failure.
   */
  private async materialize(
    base: Pick<
      EnvironmentRecord,
      | "id"
      | "project"
      | "name"
      | "plan"
      | "command"
      | "images"
      | "parentVersion"
      | "verifierImage"
      | "testsTar"
    >,
    from: VersionRecord | undefined,
    undo: Undo,
    phase: PhaseListener,
  ): Promise<EnvironmentRecord> {
    const { plan, command } = base;
    phase("place", { host: this.options.hostId });
    const t0 = Date.now();
    const envRef = { project: base.project, id: base.id };
    const netName = this.dockerName(base.project, base.name);
    const egressDenied = plan.egress === "deny";

    const network = await this.netLock.with("subnet", async () => {
      // Another runtime on the same engine may take the same /24 between our look and our
      // create: the engine refuses the overlap, and we look again.
      for (let attempt = 0; ; attempt++) {
        const { subnet, gateway } = await this.allocateSubnet();
        try {
          return await this.docker.createNetwork({
            name: netName,
            internal: egressDenied,
            subnet,
            gateway,
            labels: this.labels(envRef, "service", command),
          });
        } catch (err) {
          if (attempt >= 5 || !/overlap/i.test((err as Error).message)) throw err;
        }
      }
    });
    undo.push(() => this.docker.removeNetwork(network.id));
    if (egressDenied) {
      await rejectToHost(network.id);
      undo.push(() => removeRejectRule(network.id));
    }

    if (from) phase("restore", { version: from.id, method: this.store.method });
    const volumes: EnvironmentRecord["volumes"] = {};
    const volumeNames: Record<string, string> = {};
    for (const vol of plan.volumes) {
      const storeId = `${base.project}-${base.name}-${vol}-${newId()}`;
      const snap = from?.volumes[vol];
      const path = snap ? await this.store.clone(snap.snapshot, storeId) : await this.store.create(storeId);
      undo.push(() => this.store.removeLive(storeId));
      const dockerName = this.dockerName(base.project, base.name, vol);
      await this.docker.createBoundVolume(
        dockerName,
        path,
        this.labels(envRef, "service", command, { volume: vol }),
      );
      undo.push(() => this.docker.removeVolume(dockerName));
      volumes[vol] = { docker: dockerName, store: storeId };
      volumeNames[vol] = dockerName;
    }

    const rec: EnvironmentRecord = {
      ...base,
      status: "running",
      network: { id: network.id, name: network.name, subnet: network.subnet, gateway: network.gateway },
      containers: {},
      volumes,
      baseline: {},
      createdAt: new Date().toISOString(),
      evidence: {},
    };
    for (const svc of plan.services) {
      const image = base.images[svc.name];
      if (!image) throw new DenvError("internal", `no image recorded for service ${svc.name}`);
      const id = await this.docker.createContainer(
        containerSpec({
          plan,
          service: svc,
          image: image.imageId,
          containerName: this.dockerName(base.project, base.name, svc.name),
          networkName: network.name,
          volumeNames,
          labels: this.labels(envRef, "service", command, {
            service: svc.name,
            ...(base.parentVersion ? { version: base.parentVersion } : {}),
          }),
        }),
      );
      rec.containers[svc.name] = id;
      undo.push(() => this.docker.removeContainer(id));
    }
    const tCreated = Date.now();

    phase("start");
    await this.startServices(rec);
    const tStarted = Date.now();
    if (!from && isProtected(plan)) await this.ownWorkdir(rec);
    phase("health");
    await this.waitHealthy(rec, plan.services);
    const tHealthy = Date.now();
    rec.baseline = await this.captureBaseline(rec);

    await this.options.beforeProbe?.(rec);
    let probe: ProbeResult | undefined;
    if (egressDenied) {
      phase("probe");
      probe = await probeEgress(this.docker, this.canary, rec);
      if (!probe.ok) {
        throw new DenvError(
          "egress_leak",
          Protection.egressLeak(base.id, probe.findings.join("; ")),
          probe.findings,
        );
      }
    }
    rec.evidence = {
      placement: { host: this.options.hostId, reason: "the host this runtime drives" },
      network: { name: network.name, subnet: network.subnet, internal: egressDenied },
      volumes: { method: this.store.method, from: from?.id ?? null },
      images: Object.fromEntries(Object.entries(base.images).map(([k, v]) => [k, v.imageId])),
      timings: {
        createMs: tCreated - t0,
        startMs: tStarted - tCreated,
        healthMs: tHealthy - tStarted,
        probeMs: probe?.durationMs ?? 0,
        totalMs: Date.now() - t0,
      },
      probe: probe ?? { skipped: "egress allowed (service project)" },
    };
    await this.records.putEnvironment(rec);
    undo.push(() => this.records.deleteEnvironment(rec.id));
    this.log(`${rec.id} ready in ${Date.now() - t0} ms`);
    return rec;
  }

  private async startServices(rec: EnvironmentRecord): Promise<void> {
    for (const svc of rec.plan.services) {
      await this.waitDependencies(rec, svc);
      const id = rec.containers[svc.name] as string;
      await this.docker.start(id);
      if (rec.plan.egress === "deny" && svc.networkMode !== "none") {
        const state = await this.docker.inspect(id);
        // A one-shot service may have exited already: it has no namespace left to fix.
        if (state?.running && state.pid > 0) await removeDefaultRoute(state.pid);
      }
    }
  }

  private async waitDependencies(rec: EnvironmentRecord, svc: ServicePlan): Promise<void> {
    for (const dep of svc.dependsOn) {
      const target = rec.plan.services.find((s) => s.name === dep.service);
      if (!target) continue;
      if (dep.condition === "service_healthy") await this.waitHealthy(rec, [target]);
      if (dep.condition === "service_completed_successfully") await this.waitCompleted(rec, target);
    }
  }

  private async waitCompleted(rec: EnvironmentRecord, svc: ServicePlan): Promise<void> {
    const id = rec.containers[svc.name] as string;
    const code = await this.docker.wait(id);
    if (code !== 0) {
      throw new DenvError(
        "docker",
        `service '${svc.name}' exited with ${code}; dependants need it to complete successfully${await this.tail(id)}`,
      );
    }
  }

  private async tail(containerId: string): Promise<string> {
    const logs = await this.docker.logs(containerId, 15).catch(() => undefined);
    if (!logs) return "";
    const text = (logs.stdout.toString() + logs.stderr.toString()).trim();
    return text ? `\nlast log lines:\n${text}` : "";
  }

  private async waitHealthy(rec: EnvironmentRecord, services: ServicePlan[]): Promise<void> {
    const deadline = Date.now() + this.options.healthTimeoutMs;
    for (const svc of services) {
      const id = rec.containers[svc.name] as string;
      const hasCheck = svc.healthcheck?.test[0] !== "NONE";
      for (;;) {
        const state = await this.docker.inspect(id);
        if (!state) throw new DenvError("docker", `service '${svc.name}' vanished while starting`);
        if (!state.running) {
          if (state.exitCode === 0 && !hasCheck) break;
          throw new DenvError(
            "docker",
            `service '${svc.name}' exited with ${state.exitCode} while starting${await this.tail(id)}`,
          );
        }
        // "none": neither the file nor the image defines a healthcheck.
        if (!hasCheck || state.health === "healthy" || state.health === "none") break;
        if (state.health === "unhealthy") {
          throw new DenvError("docker", `service '${svc.name}' is unhealthy${await this.tail(id)}`);
        }
        // Docker runs the first check only after a whole interval (engines before API 1.44 have
        // no start_interval): run the file's own check now, as Docker would, and go on as soon as
        // it passes. Forks start in about a second less per dependency level.
        if (await this.checkNow(id, svc)) break;
        if (Date.now() > deadline) {
          throw new DenvError(
            "timeout",
            `service '${svc.name}' was not healthy after ${this.options.healthTimeoutMs} ms${await this.tail(id)}`,
          );
        }
        await new Promise((r) => setTimeout(r, 50));
      }
    }
  }

  /** Runs a service's compose healthcheck once, as the container's user; true when it passes. */
  private async checkNow(containerId: string, svc: ServicePlan): Promise<boolean> {
    const test = svc.healthcheck?.test ?? [];
    const argv =
      test[0] === "CMD-SHELL"
        ? ["/bin/sh", "-c", test.slice(1).join(" ")]
        : test[0] === "CMD"
          ? test.slice(1)
          : [];
    if (argv.length === 0) return false;
    const res = await runExec(this.docker, {
      containerId,
      argv,
      timeoutMs: svc.healthcheck?.timeoutMs ?? 30_000,
      outputLimit: 4096,
    }).catch(() => undefined);
    return res?.exitCode === 0;
  }

  /**
   * Protection 1: the agent user owns its workdir (set once at deploy; forks inherit it).
   * Done from the host inside the container's mount namespace and root: a root exec would have
   * no capabilities when the service runs as a non-root user, and paths (symlinks included)
   * must resolve inside the container, never on the host.
   */
  private async ownWorkdir(rec: EnvironmentRecord): Promise<void> {
    const { service, user, workdir } = rec.plan.agent;
    const state = await this.docker.inspect(rec.containers[service] as string);
    if (!state?.running) throw new DenvError("docker", `agent service '${service}' is not running`);
    const res = await run("nsenter", [
      "-t",
      String(state.pid),
      "-m",
      "-r",
      "-w/",
      "--",
      "sh",
      "-c",
      'mkdir -p -- "$1" && chown -R -h -- "$2" "$1"',
      "sh",
      workdir,
      chownSpec(user),
    ]);
    if (res.code !== 0) {
      throw new DenvError(
        "docker",
        `cannot give ${workdir} to the agent user ${user} in service '${service}': ${res.stderr.trim()}`,
      );
    }
  }

  private async captureBaseline(rec: EnvironmentRecord): Promise<EnvironmentRecord["baseline"]> {
    const out: EnvironmentRecord["baseline"] = {};
    for (const [svc, id] of Object.entries(rec.containers)) {
      const pids = await this.docker.processes(id);
      out[svc] = await Promise.all(pids.map(async (p): Promise<[number, number]> => [p, await startTime(p)]));
    }
    return out;
  }

  // ---------------------------------------------------------------- exec

  async exec(envId: string, o: ExecOptions): Promise<RawExecResult> {
    const rec = await this.requireEnvironment(envId);
    const service = o.service ?? rec.plan.agent.service;
    const containerId = rec.containers[service];
    if (!containerId) {
      throw new DenvError(
        "not_found",
        `environment ${envId} has no service '${service}' (services: ${Object.keys(rec.containers).join(", ")})`,
      );
    }
    if ((o.cmd === undefined) === (o.shell === undefined)) {
      throw new DenvError(
        "invalid_request",
        "give exactly one of 'cmd' (argv) and 'shell' (a string for sh -c)",
      );
    }
    const isAgent = service === rec.plan.agent.service;
    const user = o.user ?? (isAgent ? rec.plan.agent.user : undefined);
    if (
      isAgent &&
      isProtected(rec.plan) &&
      user !== undefined &&
      (await this.resolvesToRoot(containerId, user))
    ) {
      throw new DenvError("agent_root", Protection.agentRoot(service));
    }
    const argv = o.cmd ?? ["sh", "-c", o.shell as string];
    return runExec(this.docker, {
      containerId,
      argv,
      ...(user !== undefined ? { user } : {}),
      ...(o.cwd !== undefined ? { cwd: o.cwd } : isAgent ? { cwd: rec.plan.agent.workdir } : {}),
      ...(o.env ? { env: o.env } : {}),
      ...(o.stdin !== undefined ? { stdin: o.stdin } : {}),
      ...(o.timeout !== undefined ? { timeoutMs: Math.round(o.timeout * 1000) } : {}),
      ...(o.tty !== undefined ? { tty: o.tty } : {}),
      ...(o.outputLimit !== undefined ? { outputLimit: o.outputLimit } : {}),
      ...(o.onStdout ? { onStdout: o.onStdout } : {}),
      ...(o.onStderr ? { onStderr: o.onStderr } : {}),
      ...(o.onFlow ? { onFlow: o.onFlow } : {}),
      ...(o.collect !== undefined ? { collect: o.collect } : {}),
      ...(o.signal ? { signal: o.signal } : {}),
    });
  }

  /** root, uid 0, or a name the container's passwd maps to uid 0. */
  async resolvesToRoot(containerId: string, user: string): Promise<boolean> {
    if (isRootUser(user)) return true;
    const name = user.split(":")[0] ?? "";
    if (/^\d+$/.test(name)) return false;
    const state = await this.docker.inspect(containerId);
    if (!state?.running) return false;
    const passwd = await readFile(`/proc/${state.pid}/root/etc/passwd`, "utf8").catch(() => "");
    return passwd.split("\n").some((line) => {
      const [n, , uid] = line.split(":");
      return n === name && uid === "0";
    });
  }

  // ---------------------------------------------------------------- files, snapshot, verify

  /** Extracts a tar archive into `dir` as the target user, after the special-file check. */
  putFiles(envId: string, dir: string, archive: Readable | Buffer, t: FilesTarget = {}) {
    return putFiles(this, envId, dir, archive, t);
  }

  /** A tar archive of `path`, read as the target user. */
  getFiles(envId: string, path: string, t: FilesTarget = {}): Promise<Readable> {
    return getFiles(this, envId, path, t);
  }

  writeFile(envId: string, path: string, content: Buffer | string, t: FilesTarget & { mode?: number } = {}) {
    return writeOneFile(this, envId, path, content, t);
  }

  readFile(envId: string, path: string, t: FilesTarget = {}): Promise<Buffer> {
    return readOneFile(this, envId, path, t);
  }

  /** Freezes the whole environment at one point and records a version. */
  snapshot(
    envId: string,
    opts: { command?: string; onPhase?: PhaseListener; number?: number } = {},
  ): Promise<VersionInfo> {
    return snapshotEnvironment(this, envId, opts);
  }

  /** Stops the agent, snapshots, forks, runs the verifier on the fork and returns its reward. */
  verify(
    envId: string,
    opts: { command?: string; keepFork?: boolean; onPhase?: PhaseListener; number?: number } = {},
  ): Promise<VerifyResult> {
    return verifyEnvironment(this, envId, opts);
  }

  // ---------------------------------------------------------------- lifecycle

  async stop(envId: string): Promise<EnvironmentInfo> {
    return this.locks.with(envId, async () => {
      const rec = await this.requireEnvironment(envId);
      for (const svc of [...rec.plan.services].reverse()) {
        const grace = Math.ceil((svc.stopGracePeriodMs ?? 10_000) / 1000);
        await this.docker.stop(rec.containers[svc.name] as string, grace);
      }
      rec.status = "stopped";
      await this.records.putEnvironment(rec);
      return this.info(rec);
    });
  }

  async start(envId: string): Promise<EnvironmentInfo> {
    return this.locks.with(envId, async () => {
      const rec = await this.requireEnvironment(envId);
      await this.startServices(rec);
      await this.waitHealthy(rec, rec.plan.services);
      rec.baseline = await this.captureBaseline(rec);
      if (rec.plan.egress === "deny") {
        const probe = await probeEgress(this.docker, this.canary, rec);
        if (!probe.ok) {
          for (const id of Object.values(rec.containers)) await this.docker.stop(id, 1);
          rec.status = "stopped";
          await this.records.putEnvironment(rec);
          throw new DenvError(
            "egress_leak",
            Protection.egressLeak(rec.id, probe.findings.join("; ")),
            probe.findings,
          );
        }
        rec.evidence = { ...rec.evidence, probe };
      }
      rec.status = "running";
      await this.records.putEnvironment(rec);
      return this.info(rec);
    });
  }

  /** Removes the environment's containers, network, firewall rule and volumes. Versions stay. */
  async destroy(envId: string): Promise<void> {
    await this.locks.with(envId, async () => {
      const rec = await this.requireEnvironment(envId);
      await this.removeEnvironment(rec);
    });
  }

  private async removeEnvironment(rec: EnvironmentRecord): Promise<void> {
    await Promise.all(Object.values(rec.containers).map((id) => this.docker.removeContainer(id)));
    await removeRejectRule(rec.network.id);
    await this.docker.removeNetwork(rec.network.id);
    for (const v of Object.values(rec.volumes)) {
      await this.docker.removeVolume(v.docker);
      await this.store.removeLive(v.store);
    }
    await this.records.deleteEnvironment(rec.id);
  }

  /** Removes a version: its committed images, volume snapshots and tests archive (when unshared). */
  async deleteVersion(versionId: string): Promise<void> {
    const v = await this.requireVersion(versionId);
    const users = (await this.records.environments()).filter((e) => e.parentVersion === v.id);
    if (users.length > 0) {
      throw new DenvError(
        "conflict",
        `version ${v.id} is the parent of ${users.map((u) => u.id).join(", ")}: destroy those environments first`,
      );
    }
    await this.records.deleteVersion(v.id);
    for (const img of Object.values(v.images)) await this.docker.removeImage(img.image);
    for (const vol of Object.values(v.volumes)) await this.store.removeSnapshot(vol.snapshot);
    await this.dropTestsIfUnused(v.testsTar);
  }

  private async dropTestsIfUnused(path: string | undefined): Promise<void> {
    if (!path) return;
    const envs = await this.records.environments();
    const versions = await this.records.versions();
    if (![...envs, ...versions].some((r) => r.testsTar === path)) await rm(path, { force: true });
  }

  async probeEgress(envId: string): Promise<ProbeResult> {
    const rec = await this.requireEnvironment(envId);
    return probeEgress(this.docker, this.canary, rec);
  }

  async logs(envId: string, service?: string, tail = 200): Promise<{ stdout: string; stderr: string }> {
    const rec = await this.requireEnvironment(envId);
    const name = service ?? rec.plan.agent.service;
    const id = rec.containers[name];
    if (!id) throw new DenvError("not_found", `environment ${envId} has no service '${name}'`);
    const logs = await this.docker.logs(id, tail);
    return { stdout: logs.stdout.toString("utf8"), stderr: logs.stderr.toString("utf8") };
  }

  async list(): Promise<{ environments: EnvironmentInfo[]; versions: VersionInfo[] }> {
    const envs = await this.records.environments();
    const versions = await this.records.versions();
    return {
      environments: envs.map((e) => this.info(e)),
      versions: versions.sort((a, b) => a.number - b.number).map((v) => versionInfo(v)),
    };
  }

  async environment(envId: string): Promise<EnvironmentInfo> {
    return this.info(await this.requireEnvironment(envId));
  }

  async version(versionId: string): Promise<VersionInfo> {
    return versionInfo(await this.requireVersion(versionId));
  }

  async requireEnvironment(envId: string): Promise<EnvironmentRecord> {
    const rec = await this.records.getEnvironment(envId);
    if (!rec) throw new DenvError("not_found", `no environment ${envId} on host ${this.options.hostId}`);
    return rec;
  }

  async requireVersion(versionId: string): Promise<VersionRecord> {
    const rec = await this.records.getVersion(versionId);
    if (!rec) throw new DenvError("not_found", `no version ${versionId} on host ${this.options.hostId}`);
    return rec;
  }

  withLock<T>(envId: string, fn: () => Promise<T>): Promise<T> {
    return this.locks.with(envId, fn);
  }

  /**
   * Protection 2, first step: kills every process that was not running when the environment
   * became ready (exec sessions, their descendants, whatever they daemonized), then confirms
   * none is left.
   */
  async stopAgent(envId: string): Promise<{ killed: number; survivors: number }> {
    const rec = await this.requireEnvironment(envId);
    const baseline = new Map(
      Object.entries(rec.baseline).map(([svc, list]) => [svc, new Set(list.map(([p, t]) => `${p}:${t}`))]),
    );
    const extras = async (): Promise<number[]> => {
      const out: number[] = [];
      for (const [svc, id] of Object.entries(rec.containers)) {
        const base = baseline.get(svc) ?? new Set<string>();
        for (const p of await this.docker.processes(id)) {
          if (!base.has(`${p}:${await startTime(p)}`)) out.push(p);
        }
      }
      return out;
    };
    // Rounds, until Docker's own view of the containers shows nothing extra: a process that
    // forked between a listing and its signal is caught by the next round, and so is a
    // healthcheck the engine started meanwhile (harmless to kill; it is not the agent's).
    let killed = 0;
    for (let round = 0; round < 10; round++) {
      const found = await extras();
      if (found.length === 0) return { killed, survivors: 0 };
      const survivors = await killAll(found);
      if (survivors.length > 0)
        throw new DenvError("agent_survived", Protection.agentSurvived(survivors.length));
      killed += found.length;
    }
    const left = await extras();
    if (left.length > 0) throw new DenvError("agent_survived", Protection.agentSurvived(left.length));
    return { killed, survivors: 0 };
  }

  // ---------------------------------------------------------------- gc

  /**
   * Reconciles Docker with this host's records: removes every container, network, volume,
   * firewall rule and store directory carrying this host's id that no record owns.
   */
  async gc(): Promise<{ removed: string[] }> {
    const removed: string[] = [];
    const envs = await this.records.environments();
    const versions = await this.records.versions();
    const own = { [Labels.managed]: "true", [Labels.host]: this.options.hostId };
    const envIds = new Set(envs.map((e) => e.id));
    const ownedContainers = new Set(envs.flatMap((e) => Object.values(e.containers)));
    for (const c of await this.docker.listContainers(own)) {
      if (!ownedContainers.has(c.id)) {
        await this.docker.removeContainer(c.id);
        removed.push(`container ${c.name}`);
      }
    }
    const ownedNetworks = new Set(envs.map((e) => e.network.id));
    for (const n of await this.docker.listNetworks(own)) {
      if (!ownedNetworks.has(n.id)) {
        await removeRejectRule(n.id);
        await this.docker.removeNetwork(n.id);
        removed.push(`network ${n.name}`);
      }
    }
    const liveNets = new Set(envs.map((e) => e.network.id.slice(0, 12)));
    const allNets = new Set((await this.docker.api.listNetworks()).map((n) => n.Id.slice(0, 12)));
    for (const short of await ruleNetworkIds()) {
      if (!liveNets.has(short) && !allNets.has(short)) {
        await removeRejectRule(short);
        removed.push(`firewall rule denv:${short}`);
      }
    }
    const ownedVolumes = new Set(envs.flatMap((e) => Object.values(e.volumes).map((v) => v.docker)));
    for (const v of await this.docker.listVolumes(own)) {
      if (!ownedVolumes.has(v.name) && envIds.has(v.labels[Labels.environment] ?? "") === false) {
        await this.docker.removeVolume(v.name);
        removed.push(`volume ${v.name}`);
      }
    }
    const liveStore = new Set(envs.flatMap((e) => Object.values(e.volumes).map((v) => v.store)));
    for (const id of await this.store.liveIds()) {
      if (!liveStore.has(id)) {
        await this.store.removeLive(id);
        removed.push(`store ${id}`);
      }
    }
    const snapStore = new Set(versions.flatMap((v) => Object.values(v.volumes).map((x) => x.snapshot)));
    for (const id of await this.store.snapshotIds()) {
      if (!snapStore.has(id)) {
        await this.store.removeSnapshot(id);
        removed.push(`snapshot ${id}`);
      }
    }
    const versionImages = new Set(versions.flatMap((v) => Object.values(v.images).map((i) => i.imageId)));
    for (const img of await this.docker.listImages(own)) {
      if (img.labels[Labels.role] === "version" && !versionImages.has(img.id)) {
        await this.docker.removeImage(img.id);
        removed.push(`image ${img.name}`);
      }
    }
    if (removed.length > 0) this.log(`gc removed ${removed.length}: ${removed.join(", ")}`);
    return { removed };
  }

  info(rec: EnvironmentRecord): EnvironmentInfo {
    return {
      id: rec.id,
      project: rec.project,
      name: rec.name,
      status: rec.status,
      ...(rec.parentVersion ? { parentVersion: rec.parentVersion } : {}),
      agent: rec.plan.agent,
      services: rec.plan.services.map((s) => ({
        name: s.name,
        containerId: rec.containers[s.name] ?? "",
        image: rec.images[s.name]?.image ?? s.image,
        imageId: rec.images[s.name]?.imageId ?? "",
      })),
      network: rec.network,
      evidence: rec.evidence,
    };
  }
}

export function versionInfo(v: VersionRecord): VersionInfo {
  return {
    id: v.id,
    project: v.project,
    number: v.number,
    sourceEnvironment: v.sourceEnvironment,
    ...(v.parentVersion ? { parentVersion: v.parentVersion } : {}),
    method: v.method,
    timings: v.timings,
    sizes: v.sizes,
    images: v.images,
    volumes: v.volumes,
    createdAt: v.createdAt,
  };
}

/** Packs a host directory into a tar file (kept on the host only: the verifier's tests). */
async function tarDirectory(dir: string, out: string): Promise<void> {
  const r = await new Promise<number>((resolveCode, reject) => {
    const child = spawn("tar", ["-C", dir, "--owner=0", "--group=0", "-cf", out, "."], { stdio: "ignore" });
    child.on("error", reject);
    child.on("close", (code) => resolveCode(code ?? 1));
  });
  if (r !== 0) throw new DenvError("invalid_compose", `cannot read the verifier's tests folder ${dir}`);
}

export { ExitCodes };
