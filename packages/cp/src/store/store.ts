import type { GithubStore } from "./github-store.js";
import type {
  DeploymentRecord,
  DeploymentStatus,
  EnvironmentRecord,
  EpisodeStepRecord,
  HostRecord,
  JoinTokenRecord,
  LogRecord,
  MachineRecord,
  PoolRecord,
  ProjectRecord,
  ReplayRecord,
  TargetRecord,
  TokenRecord,
  VersionRecord,
} from "./records.js";

export interface EnvironmentFilter {
  project?: string;
  hostId?: string;
  sandbox?: boolean;
  /** Pool members only (true) or none of them (false); absent: both. */
  pool?: boolean;
  /** Only environments whose sandbox TTL ended before this instant (ISO). */
  expiredBefore?: string;
}

/**
 * Persistence of the control plane. One implementation (Kysely) over two dialects (SQLite,
 * PostgreSQL) with the same migrations; services depend on this interface only. Inserts of an
 * existing key throw DenvError("conflict").
 */
export interface Store {
  migrate(): Promise<void>;
  close(): Promise<void>;
  /** The GitHub integration's rows (connections, deliveries, check runs). */
  readonly github: GithubStore;

  createToken(t: TokenRecord): Promise<void>;
  tokenByHash(hash: string): Promise<TokenRecord | undefined>;
  listTokens(): Promise<TokenRecord[]>;
  deleteToken(id: string): Promise<boolean>;

  createProject(p: ProjectRecord): Promise<void>;
  getProject(name: string): Promise<ProjectRecord | undefined>;
  listProjects(): Promise<ProjectRecord[]>;
  deleteProject(name: string): Promise<boolean>;
  /** Reserves the project's next version number (atomic; numbers are never reused). */
  nextVersionNumber(project: string): Promise<number>;

  /** A project's pool settings; put replaces them. */
  getPool(project: string): Promise<PoolRecord | undefined>;
  listPools(): Promise<PoolRecord[]>;
  putPool(p: PoolRecord): Promise<void>;

  putEnvironment(e: EnvironmentRecord): Promise<void>;
  getEnvironment(id: string): Promise<EnvironmentRecord | undefined>;
  listEnvironments(filter?: EnvironmentFilter): Promise<EnvironmentRecord[]>;
  /** How many environments each host runs (hosts with none are absent): one grouped query. */
  countEnvironmentsByHost(): Promise<Map<string, number>>;
  /** The row, its episode log and its replays. */
  deleteEnvironment(id: string): Promise<void>;

  createDeployment(d: DeploymentRecord): Promise<void>;
  updateDeployment(d: DeploymentRecord): Promise<void>;
  getDeployment(id: string): Promise<DeploymentRecord | undefined>;
  /** Newest first. */
  listDeployments(filter: { project?: string; statuses?: DeploymentStatus[] }): Promise<DeploymentRecord[]>;
  countDeploymentsByStatus(): Promise<Record<string, number>>;

  /**
   * Writes a step of an environment's episode log (replacing the row of the same seq: the
   * overflow row past the cap is rewritten as it counts).
   */
  putEpisodeStep(r: EpisodeStepRecord): Promise<void>;
  /** Steps with seq > afterSeq, by seq, at most `limit`; `kept` bytes only when asked. */
  listEpisodeSteps(
    environment: string,
    q: { afterSeq: number; limit: number; kept?: boolean; maxSeq?: number },
  ): Promise<EpisodeStepRecord[]>;
  /** The highest seq of an environment's log (0: none). */
  lastEpisodeSeq(environment: string): Promise<number>;

  /** Keeps a replay of an episode (deleted with the episode environment). */
  putReplay(r: ReplayRecord): Promise<void>;
  /** An episode environment's replays, newest first. */
  listReplays(environment: string): Promise<ReplayRecord[]>;

  appendLog(entry: LogRecord): Promise<void>;
  listLogs(deploymentId: string, afterSeq: number): Promise<LogRecord[]>;

  /** Records a new version and, with it, its origin's replica (v.host_id; stamped now). */
  createVersion(v: VersionRecord): Promise<void>;
  getVersion(project: string, number: number): Promise<VersionRecord | undefined>;
  /** Newest first. */
  listVersions(project: string): Promise<VersionRecord[]>;
  /** The version and its replica rows. */
  deleteVersion(id: string): Promise<void>;

  /**
   * Records that `hostId` holds a replica of the version (idempotent: the first `at` is kept).
   * `at` is when the cp recorded it, by its own clock: a host's hello reconciles only the
   * replicas recorded before it arrived. False, and nothing recorded, when there is no such
   * version (it was deleted meanwhile).
   */
  putReplica(versionId: string, hostId: string, at: string): Promise<boolean>;
  /** The hosts holding the version: the origin first, then by host id. */
  listReplicas(versionId: string): Promise<string[]>;
  /** The versions `hostId` holds a replica of, by id; only those recorded before `recordedBefore` when given. */
  listReplicasOnHost(hostId: string, recordedBefore?: string): Promise<string[]>;
  /**
   * Forgets `hostId`'s replica and answers the hosts still holding the version (origin first).
   * When `hostId` was the origin, the origin moves to the first of them by host id; when none
   * is left the version row stays, for the caller to delete.
   */
  deleteReplica(versionId: string, hostId: string): Promise<string[]>;

  createTarget(t: TargetRecord): Promise<void>;
  getTarget(name: string): Promise<TargetRecord | undefined>;
  listTargets(): Promise<TargetRecord[]>;
  /** Replaces the row's settings and sealed credentials (a key rotation reseals them). */
  updateTarget(t: TargetRecord): Promise<void>;
  /** The row and its machine rows; false when there is none. */
  deleteTarget(name: string): Promise<boolean>;

  /** Inserts or replaces a machine of a provisioned target. */
  putMachine(m: MachineRecord): Promise<void>;
  getMachine(id: string): Promise<MachineRecord | undefined>;
  /** A target's machines, oldest first (deleted ones included). */
  listMachines(target: string): Promise<MachineRecord[]>;

  createHost(h: HostRecord): Promise<void>;
  updateHost(h: HostRecord): Promise<void>;
  getHost(id: string): Promise<HostRecord | undefined>;
  hostByCredentialHash(hash: string): Promise<HostRecord | undefined>;
  listHosts(filter?: { target?: string }): Promise<HostRecord[]>;
  /** Marks a host draining (keeps the first time); false when there is no such host. */
  drainHost(id: string, at: string): Promise<boolean>;
  deleteHost(id: string): Promise<boolean>;

  createJoinToken(t: JoinTokenRecord): Promise<void>;
  joinTokenByHash(hash: string): Promise<JoinTokenRecord | undefined>;
  /** A target's join tokens, oldest first. */
  listJoinTokens(target: string): Promise<JoinTokenRecord[]>;
  /** Marks a join token revoked (keeps the first time); false when `target` has no such token. */
  revokeJoinToken(target: string, id: string, at: string): Promise<boolean>;
  /** Takes one use if any is left (atomic); false when none was. */
  consumeJoinToken(id: string): Promise<boolean>;
}
