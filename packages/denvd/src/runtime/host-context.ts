import { mkdir } from "node:fs/promises";
import { join } from "node:path";
import { DenvError } from "@denv/spec/errors";
import { labelsFor, type Role } from "@denv/spec/labels";
import { checkName } from "@denv/spec/names";
import { hostMirrors } from "../build/host-mirrors.js";
import type { MirrorEgress } from "../build/mirror-egress.js";
import { DockerClient } from "../docker/docker-client.js";
import { Canary } from "../host/canary.js";
import { type EnvironmentRecord, RecordStore, type VersionRecord } from "../records.js";
import { openVolumeStore, type VolumeStore } from "../volume-store.js";
import { Locks } from "./locks.js";

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
  /** Hosts the builds of rl-environments may fetch from (default: this host's apt and pip mirrors). */
  buildMirrors?: string[];
  /** The engine's runtime for x-denv.agent.sandbox: gvisor (default runsc). */
  gvisorRuntime?: string;
  /** How old an untagged build of this host must be before gc removes it (default 600 s). */
  buildGraceS?: number;
}

/** The tunables of a host, defaults filled in. */
export interface HostSettings {
  subnetPool: string;
  squashThreshold: number;
  healthTimeoutMs: number;
  beforeProbe: ((env: EnvironmentRecord) => Promise<void>) | undefined;
  buildMirrors: readonly string[];
  gvisorRuntime: string;
  buildGraceS: number;
}

const DEFAULTS = {
  storeMethod: "auto" as const,
  storeLoopBytes: 64 * 1024 ** 3,
  subnetPool: "10.213.0.0/16",
  squashThreshold: 100,
  healthTimeoutMs: 120_000,
  // A deploy uses its build within this; an untagged build older than it is garbage.
  buildGraceS: 600,
};

/**
 * What every part of the runtime shares on one host: the engine client, the records, the volume
 * store, the canary, the host's identity (labels, Docker names) and the environment locks. Built
 * once by `openHostContext`; the runtime's modules take it instead of reaching into each other.
 */
export interface HostContext {
  readonly hostId: string;
  readonly stateDir: string;
  readonly docker: DockerClient;
  readonly records: RecordStore;
  readonly store: VolumeStore;
  readonly canary: Canary;
  readonly settings: HostSettings;
  /** Lifecycle operations on one environment (by id) do not interleave. */
  readonly locks: Locks;
  /** Build networks in use: no record owns them, and gc leaves them alone. */
  readonly building: Set<string>;
  /** The mirror proxies of environments with x-denv.egress: mirrors, by environment id. */
  readonly agentEgress: Map<string, MirrorEgress>;
  log(line: string): void;
  /** The labels of an object this host creates for an environment. */
  labels(
    env: { project: string; id: string },
    role: Role,
    command: string,
    extra?: { version?: string | undefined; service?: string; volume?: string },
  ): Record<string, string>;
  /** Docker name of an object of environment `env` (unique per host). */
  dockerName(project: string, env: string, suffix?: string): string;
}

/** Connects to Docker, opens the records, the volume store and the canary. */
export async function openHostContext(options: RuntimeOptions): Promise<HostContext> {
  const hostId = checkName("project", options.hostId);
  const docker = new DockerClient(options.dockerSocket);
  await docker.ping();
  await mkdir(join(options.stateDir, "tests"), { recursive: true, mode: 0o700 });
  const records = new RecordStore(join(options.stateDir, "records"));
  await records.init();
  const store = await openVolumeStore({
    dir: join(options.stateDir, "store"),
    method: options.storeMethod ?? DEFAULTS.storeMethod,
    loopSizeBytes: options.storeLoopBytes ?? DEFAULTS.storeLoopBytes,
  });
  const canary = new Canary();
  await canary.listen(options.canaryPort ?? 0);
  const log = options.log ?? (() => undefined);
  return {
    hostId,
    stateDir: options.stateDir,
    docker,
    records,
    store,
    canary,
    settings: {
      subnetPool: options.subnetPool ?? DEFAULTS.subnetPool,
      squashThreshold: options.squashThreshold ?? DEFAULTS.squashThreshold,
      healthTimeoutMs: options.healthTimeoutMs ?? DEFAULTS.healthTimeoutMs,
      buildGraceS: options.buildGraceS ?? DEFAULTS.buildGraceS,
      beforeProbe: options.beforeProbe,
      buildMirrors: options.buildMirrors ?? (await hostMirrors()),
      gvisorRuntime: options.gvisorRuntime ?? "runsc",
    },
    locks: new Locks(),
    building: new Set(),
    agentEgress: new Map(),
    log,
    labels: (env, role, command, extra = {}) =>
      labelsFor({ host: hostId, project: env.project, environment: env.id, role, command, ...extra }),
    dockerName: (project, env, suffix) => `denv-${hostId}-${project}-${env}${suffix ? `-${suffix}` : ""}`,
  };
}

export async function requireEnvironment(ctx: HostContext, envId: string): Promise<EnvironmentRecord> {
  const rec = await ctx.records.getEnvironment(envId);
  if (!rec) throw new DenvError("not_found", `no environment ${envId} on host ${ctx.hostId}`);
  return rec;
}

export async function requireVersion(ctx: HostContext, versionId: string): Promise<VersionRecord> {
  const rec = await ctx.records.getVersion(versionId);
  if (!rec) throw new DenvError("not_found", `no version ${versionId} on host ${ctx.hostId}`);
  return rec;
}
