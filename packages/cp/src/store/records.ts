import type { Deployment, Environment, Phase, TargetKindName, Version } from "@denv/spec";

/**
 * What the store holds. Records are the cp's own view (camelCase); `services/present.ts` maps
 * them onto the API resources of spec/api.ts.
 */

export type Role = "admin" | "member";

export interface TokenRecord {
  id: string;
  name: string;
  role: Role;
  project?: string;
  hash: string;
  createdAt: string;
}

export interface ProjectRecord {
  name: string;
  kind: "rl-environment" | "service";
  repo?: string;
  composePath: string;
  createdAt: string;
}

export type EnvironmentStatus = Environment["status"];

export interface EnvironmentRecord {
  /** PROJECT/ENV as clients address it. */
  id: string;
  project: string;
  name: string;
  hostId?: string;
  /** The environment's name on its host: the host's id for it is `${project}/${hostEnv}`. */
  hostEnv?: string;
  status: EnvironmentStatus;
  version?: string;
  parentVersion?: string;
  sandbox: boolean;
  /** A warm fork of its project's pool, waiting for a sandbox claim (never listed as an environment). */
  pool?: boolean;
  expiresAt?: string;
  services: Environment["services"];
  agent?: Environment["agent"];
  evidence?: Record<string, unknown>;
  createdAt: string;
  updatedAt: string;
}

/** A project's pool: the size its file asks for (x-denv.pool) and an admin's override. */
export interface PoolRecord {
  project: string;
  sizeFile?: number;
  sizeSet?: number;
  updatedAt: string;
}

export type DeploymentStatus = Deployment["status"];

/**
 * A deployment row. `state` holds what a resumed run needs to continue exactly where it stopped:
 * the request, the chosen host, the version number, and the result of every finished step.
 */
export interface DeploymentRecord {
  id: string;
  kind: Deployment["kind"];
  project: string;
  environment: string;
  status: DeploymentStatus;
  phases: Phase[];
  result?: unknown;
  error?: { code: string; message: string };
  hostId?: string;
  state: DeploymentState;
  createdAt: string;
  finishedAt?: string;
}

export interface DeploymentState {
  /** The request that created the deployment (kind-specific, validated by the engine). */
  request: Record<string, unknown>;
  /** Results of finished steps, by step name. */
  steps: Record<string, unknown>;
}

/**
 * A row of an episode's command log: a step (an EpisodeStep, parsed by the service) or, at seq
 * cap + 1, the count of steps run after the log was full. `kept`: the stdin or tar a replay resends.
 */
export interface EpisodeStepRecord {
  environment: string;
  seq: number;
  data: unknown;
  kept?: Buffer;
}

/** A replay of an episode, kept by the cp; `steps` is a ReplaySummary's steps (parsed by the service). */
export interface ReplayRecord {
  id: string;
  environment: string;
  environmentName: string;
  fork: string;
  version: string;
  tokenId: string;
  diverged: number;
  divergedAt?: number;
  steps: unknown;
  createdAt: string;
}

export interface LogRecord {
  deploymentId: string;
  seq: number;
  ts: string;
  event: "phase" | "log";
  data: unknown;
}

/** The API's Version without `replicas`, which live in their own rows (Store.listReplicas). */
export type VersionRecord = Omit<Version, "replicas">;

export interface TargetRecord {
  name: string;
  kind: TargetKindName;
  createdAt: string;
  /** The kind's settings, defaults filled (absent on rows from before 0007_target_drivers). */
  settings?: Record<string, unknown>;
  /** The credentials, sealed by the cp's credential key (targets/secret-box.ts). */
  credentials?: string;
}

/** A machine a provisioned target created; `id` is also its name at the provider. */
export interface MachineRecord {
  id: string;
  target: string;
  providerId?: string;
  status: "creating" | "running" | "joined" | "deleting" | "deleted" | "failed";
  costClass: string;
  hostId?: string;
  joinTokenId?: string;
  error?: string;
  /** Since when its host has held no environment (idle shutdown counts from here). */
  idleSince?: string;
  createdAt: string;
  updatedAt: string;
}

export interface HostCapacity {
  cpus: number;
  memory_bytes: number;
  disk_free_bytes: number;
  /** Processes it can run, when the host says (placement checks pids caps against it then). */
  pids?: number;
}

export interface HostRecord {
  id: string;
  target: string;
  credentialHash: string;
  status: "online" | "offline";
  version?: string;
  labels: Record<string, string>;
  capacity?: HostCapacity;
  lastSeenAt?: string;
  /** When an admin drained it: placement skips it from then on. */
  drainingAt?: string;
  createdAt: string;
}

export interface JoinTokenRecord {
  id: string;
  target: string;
  hash: string;
  usesLeft: number;
  expiresAt: string;
  /** When an admin revoked it. */
  revokedAt?: string;
  createdAt: string;
}
