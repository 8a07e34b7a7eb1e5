import { z } from "zod";
import { ExecRequest } from "./exec.js";
import { GitRef } from "./github.js";
import { MAX_POOL_SIZE } from "./messages.js";
import { DeploymentKind, PhaseName } from "./phases.js";
import { TargetKindName } from "./targets.js";

/**
 * The REST API's resources (JSON, snake_case), shared by the control plane (which validates its
 * responses with them and generates /v1/openapi.json from them), the SDK and the CLI.
 * docs/reference/api.md lists the routes.
 */

export const ErrorResponse = z.object({
  error: z.object({ code: z.string(), message: z.string(), details: z.array(z.string()).optional() }),
});
export type ErrorResponse = z.infer<typeof ErrorResponse>;

export const Project = z.object({
  name: z.string(),
  kind: z.enum(["rl-environment", "service"]),
  /** Git URL, when the project deploys from a repository. */
  repo: z.string().optional(),
  compose_path: z.string(),
  created_at: z.string(),
});
export type Project = z.infer<typeof Project>;

export const CreateProject = z.object({
  name: z.string(),
  kind: z.enum(["rl-environment", "service"]).default("rl-environment"),
  repo: z.string().optional(),
  compose_path: z.string().default("compose.yaml"),
});

export const ServiceRef = z.object({
  name: z.string(),
  container_id: z.string(),
  image: z.string(),
  image_id: z.string(),
});

/** The agent service of an environment, the user exec defaults to, and its workdir. */
export const AgentRef = z.object({ service: z.string(), user: z.string(), workdir: z.string() });

/**
 * `destroying`: a destroy was asked (DELETE /v1/sandboxes/...) and is finishing on its host; it
 * takes no more exec, files or tunnels, and holds its room on the host until it is gone.
 */
export const EnvironmentStatus = z.enum([
  "pending",
  "running",
  "stopped",
  "failed",
  "destroying",
  "destroyed",
]);

export const Environment = z.object({
  /** PROJECT/ENV */
  id: z.string(),
  project: z.string(),
  name: z.string(),
  status: EnvironmentStatus,
  host_id: z.string().optional(),
  /** The version the environment runs (a deploy's new version, or a fork's parent). */
  version: z.string().optional(),
  parent_version: z.string().optional(),
  /** A sandbox is an environment for one episode, destroyed at `expires_at`. */
  sandbox: z.boolean(),
  expires_at: z.string().optional(),
  services: z.array(ServiceRef),
  agent: AgentRef.optional(),
  evidence: z.record(z.string(), z.unknown()).optional(),
  /**
   * Its host's stream is connected, so exec, files, logs and tunnels can reach it: false while
   * the host is offline (its `status` is what the host last said) and when it runs on no host.
   */
  reachable: z.boolean(),
  /** A sandbox's answer: `hit` when it was a warm fork of the project's pool, `miss` when it was forked cold. */
  pool: z.enum(["hit", "miss"]).optional(),
  created_at: z.string(),
});
export type Environment = z.infer<typeof Environment>;

/**
 * A project's warm fork pool (docs/how-to/warm-pools.md): forks of its current version, started,
 * healthy and probed, that a sandbox claims instead of forking cold.
 */
export const Pool = z.object({
  project: z.string(),
  /** The version its forks are of (what a sandbox without `version` gets); absent: none yet. */
  version: z.string().optional(),
  /** How many ready forks it keeps. */
  size: z.number().int().nonnegative(),
  /** `set`: an admin's size (denv pools set); `file`: the project's x-denv.pool; `off`: neither. */
  source: z.enum(["set", "file", "off"]),
  /** Forks ready to be claimed. */
  ready: z.number().int().nonnegative(),
  /** Forks being made. */
  filling: z.number().int().nonnegative(),
});
export type Pool = z.infer<typeof Pool>;
export const PoolList = z.object({ pools: z.array(Pool) });
/** `size: null` drops the admin's size (the file's x-denv.pool applies again). */
export const SetPool = z.object({ size: z.number().int().min(0).max(MAX_POOL_SIZE).nullable() });

export const PhaseStatus = z.enum(["pending", "running", "succeeded", "failed", "skipped"]);

export const Phase = z.object({
  name: PhaseName,
  status: PhaseStatus,
  started_at: z.string().optional(),
  finished_at: z.string().optional(),
  duration_ms: z.number().optional(),
  evidence: z.record(z.string(), z.unknown()).optional(),
});
export type Phase = z.infer<typeof Phase>;

export const DeploymentStatus = z.enum(["queued", "running", "succeeded", "failed"]);

export const Deployment = z.object({
  id: z.string(),
  kind: DeploymentKind,
  project: z.string(),
  /** PROJECT/ENV the deployment changes. */
  environment: z.string(),
  status: DeploymentStatus,
  phases: z.array(Phase),
  /** What the deployment produced: the environment, the version, the verify result. */
  result: z.unknown().optional(),
  error: z.object({ code: z.string(), message: z.string() }).optional(),
  host_id: z.string().optional(),
  created_at: z.string(),
  finished_at: z.string().optional(),
});
export type Deployment = z.infer<typeof Deployment>;

export const Version = z.object({
  /** PROJECT@vN */
  id: z.string(),
  project: z.string(),
  number: z.number().int(),
  /** The origin: the host that captured it (or, once that one is gone, a host holding a replica). */
  host_id: z.string(),
  source_environment: z.string(),
  parent_version: z.string().optional(),
  /** Image id per service. */
  digests: z.record(z.string(), z.string()),
  volumes: z.record(z.string(), z.object({ snapshot: z.string(), bytes: z.number() })),
  method: z.string(),
  sizes: z.object({ layer_bytes: z.number(), volume_bytes: z.number() }),
  timings: z.record(z.string(), z.number()),
  created_at: z.string(),
  /**
   * The hosts holding its snapshot, the origin first: a fork restores on one of them, or on
   * another host after a transfer from one. The control plane always sets it; a host's own
   * report of a version it captured (the `env.snapshot` result) leaves it out.
   */
  replicas: z.array(z.string()).optional(),
});
export type Version = z.infer<typeof Version>;

export const TargetKind = TargetKindName;

export const Capabilities = z.object({
  multi_service: z.boolean(),
  snapshot: z.boolean(),
  fork: z.boolean(),
  pause: z.boolean(),
  egress_control: z.boolean(),
  exec_streaming: z.boolean(),
  files: z.boolean(),
  port_tunnels: z.boolean(),
  gpu: z.boolean(),
});

export const Target = z.object({
  name: z.string(),
  kind: TargetKind,
  capabilities: Capabilities,
  /** The kind's settings with their defaults filled (docs/reference/targets.md#settings). */
  settings: z.record(z.string(), z.unknown()).default({}),
  /** The names of the credentials it holds; their values are never returned. */
  credentials: z.array(z.string()).default([]),
  created_at: z.string(),
});
export type Target = z.infer<typeof Target>;

export const Host = z.object({
  id: z.string(),
  target: z.string(),
  status: z.enum(["online", "offline"]),
  version: z.string().optional(),
  labels: z.record(z.string(), z.string()),
  capacity: z
    .object({
      cpus: z.number(),
      memory_bytes: z.number(),
      disk_free_bytes: z.number(),
      /** Processes the host can run, when it says. */
      pids: z.number().optional(),
    })
    .optional(),
  environments: z.number().int(),
  /** An admin drained it: placement never picks it again; what it holds stays. */
  draining: z.boolean(),
  last_seen_at: z.string().optional(),
  created_at: z.string(),
});
export type Host = z.infer<typeof Host>;

/**
 * What DELETE /v1/hosts/:id did: the host's environments marked failed, the versions only it held
 * forgotten, its replicas of the others dropped.
 */
export const RemovedHost = z.object({
  id: z.string(),
  /** Environments it held (with ?force=true): failed now, and runnable on no host; destroy them. */
  environments: z.array(z.string()),
  /** Versions whose only snapshot lived on it: forgotten, since nothing can restore them. */
  versions: z.array(z.string()),
  /** Versions it held a replica of that other hosts still hold: they live on there. */
  replicas_dropped: z.array(z.string()).default([]),
});

/** The longest a join token or a sandbox may live: a year (a longer one is a mistake). */
export const MAX_TTL_SEC = 365 * 24 * 3600;

export const CreateJoinToken = z.object({
  /** How many hosts may join with it (default 1). */
  uses: z.number().int().positive().default(1),
  ttl_sec: z.number().int().positive().max(MAX_TTL_SEC).default(3600),
});

/** `token` is shown once; only its hash is stored. */
export const JoinToken = z.object({
  id: z.string(),
  target: z.string(),
  token: z.string().optional(),
  uses_left: z.number().int(),
  expires_at: z.string(),
  /** Set once an admin revoked it: it joins no more hosts. */
  revoked_at: z.string().optional(),
  created_at: z.string(),
});

export const JoinRequest = z.object({
  token: z.string(),
  /** The target the host means to join; a token of another target is then refused as not valid. */
  target: z.string().optional(),
  /** The host's own name (becomes its id when free). */
  name: z.string().optional(),
  labels: z.record(z.string(), z.string()).default({}),
});

export const JoinResponse = z.object({ host_id: z.string(), credential: z.string(), target: z.string() });

export const CreateApiToken = z.object({
  name: z.string(),
  /** Limits the token to one project; absent = all projects (admin only may create those). */
  project: z.string().optional(),
  role: z.enum(["admin", "member"]).default("member"),
});

export const ApiToken = z.object({
  id: z.string(),
  name: z.string(),
  project: z.string().optional(),
  role: z.enum(["admin", "member"]),
  token: z.string().optional(),
  created_at: z.string(),
});

export const ForkRequest = z.object({
  /** Version to fork (PROJECT@vN or N); default: the project's current version. */
  version: z.string().optional(),
  name: z.string().optional(),
});

export const RollbackRequest = z.object({ version: z.string() });

/** The most sandboxes one POST /v1/sandboxes creates. */
export const MAX_SANDBOX_COUNT = 256;

export const CreateSandbox = z.object({
  project: z.string(),
  version: z.string().optional(),
  /** With `count`, sandbox i is named NAME-i. */
  name: z.string().optional(),
  /** Seconds until the sandbox is destroyed (default 3600). */
  ttl_sec: z.number().int().positive().max(MAX_TTL_SEC).default(3600),
  /** N forks of the version in one call, answered as {sandboxes} once all are ready (or none is left). */
  count: z.number().int().min(1).max(MAX_SANDBOX_COUNT).optional(),
});

/** What an environment reserves on its host (its services' caps), and a host's room in the same terms. */
export const Reservation = z.object({ memory_bytes: z.number(), cpus: z.number(), pids: z.number() });
export type Reservation = z.infer<typeof Reservation>;

/**
 * The most candidates a `place` phase's evidence lists. A target with more hosts lists this many
 * (the chosen host, the version's holders, the best scores, then excluded hosts) and counts the
 * others in `omitted`, so that evidence stays small however many hosts a target has.
 */
export const PLACEMENT_CANDIDATES_LISTED = 20;

/**
 * Why a host was chosen: the evidence of the `place` phase (docs/reference/targets.md#placement).
 * Every listed candidate has a score, or the reason it was left out.
 */
export const PlacementEvidence = z.object({
  host: z.string(),
  reason: z.string(),
  /**
   * The target's kind and what enforces the protections there (`denvd` on every kind with a
   * driver today: the protections are the host's, never claimed for a provider that cannot
   * enforce them). Absent in rows from before them.
   */
  target: z.object({ name: z.string(), kind: z.string(), enforced_by: z.string() }).optional(),
  /** What the new environment reserves. */
  need: Reservation,
  /** The placement labels asked for. */
  labels: z.record(z.string(), z.string()),
  candidates: z.array(
    z.object({
      host: z.string(),
      environments: z.number().int(),
      memory_bytes: z.number().optional(),
      /** Room left before this placement: capacity x overcommit - what is already placed there. */
      free: z.object({ memory_bytes: z.number(), cpus: z.number(), pids: z.number().optional() }).optional(),
      /** Holds the version (or, for a deploy, the project's newest version). */
      local: z.boolean().optional(),
      /** A fork on a host without the version: the bytes to move there first. */
      transfer_bytes: z.number().optional(),
      /** ... and what that costs in the score (transfer weight x min(1, estimated seconds / 60)). */
      transfer_cost: z.number().optional(),
      score: z.number().optional(),
      excluded: z.string().optional(),
    }),
  ),
  /**
   * Candidates not listed (more than PLACEMENT_CANDIDATES_LISTED): how many had a score, and how
   * many were excluded for being offline, draining, without a label asked for, or without room.
   */
  omitted: z
    .object({
      eligible: z.number().int(),
      offline: z.number().int(),
      draining: z.number().int(),
      labels: z.number().int(),
      room: z.number().int(),
    })
    .optional(),
  /** The chosen host does not hold the version: it is sent there from `from` (an online holder). */
  transfer: z.object({ from: z.string(), bytes: z.number() }).optional(),
});
export type PlacementEvidence = z.infer<typeof PlacementEvidence>;

/** POST /v1/sandboxes with `count`: the ready sandboxes, each with where it was placed and why. */
export const SandboxBatch = z.object({
  sandboxes: z.array(Environment.extend({ placement: PlacementEvidence })),
});

export const VerifyResponse = z.object({
  status: z.enum(["graded", "refused", "failed"]),
  reward: z.number(),
  rewards: z.record(z.string(), z.number()),
  message: z.string().optional(),
  log: z.string(),
  version: z.string(),
  fork: z.string(),
  evidence: z.record(z.string(), z.unknown()),
});
export type VerifyResponse = z.infer<typeof VerifyResponse>;

export const ExecResponse = z.object({
  exit_code: z.number().int(),
  stdout: z.string(),
  stderr: z.string(),
  /** "utf8" when stdout/stderr are valid UTF-8 text, else "base64". */
  encoding: z.enum(["utf8", "base64"]),
  timed_out: z.boolean(),
  truncated: z.boolean(),
  duration_ms: z.number().int(),
});
export type ExecResponse = z.infer<typeof ExecResponse>;

// ---- added with the control plane: list envelopes and the remaining route shapes ----

export const Health = z.object({ ok: z.literal(true) });

export const WhoAmI = z.object({
  id: z.string(),
  name: z.string(),
  role: z.enum(["admin", "member"]),
  project: z.string().optional(),
});
export type WhoAmI = z.infer<typeof WhoAmI>;

export const CreateTarget = z.object({
  name: z.string(),
  kind: TargetKind,
  /** The kind's settings (strings or JSON values), validated per kind. */
  settings: z.record(z.string(), z.unknown()).default({}),
  /** Secrets (API keys, cloud keys), stored encrypted and never returned. */
  credentials: z.record(z.string(), z.string()).default({}),
});

/** JSON body of POST /v1/projects/:project/deploy for a project that deploys from its repo. */
export const DeployGitRequest = z.object({ git_ref: GitRef });

export const TokenList = z.object({ tokens: z.array(ApiToken) });
export const ProjectList = z.object({ projects: z.array(Project) });
export const DeploymentList = z.object({ deployments: z.array(Deployment) });
export const EnvironmentList = z.object({ environments: z.array(Environment) });
export const SandboxList = z.object({ sandboxes: z.array(Environment) });
/**
 * DELETE /v1/sandboxes/:project/:env: `destroying` once the sandbox is unreachable (the destroy
 * deployment finishes in the background), `destroyed` with `?wait=true` once it is gone.
 */
export const SandboxDestroy = z.object({
  id: z.string(),
  status: z.enum(["destroying", "destroyed"]),
  /** The destroy deployment (GET /v1/deployments/:id follows it). */
  deployment: z.string(),
});
export const VersionList = z.object({ versions: z.array(Version) });
export const TargetList = z.object({ targets: z.array(Target) });

/** GET /v1/hosts: hosts per page when the request gives no `limit`, and the most it may ask for. */
export const HOSTS_PAGE = { default: 100, max: 1000 } as const;

/**
 * One page of GET /v1/hosts: hosts by id. `next` is there when more hosts follow: pass it as
 * `after` for the next page (it is the id of the last host on this one).
 */
export const HostList = z.object({ hosts: z.array(Host), next: z.string().optional() });
export const JoinTokenList = z.object({ join_tokens: z.array(JoinToken) });

/** PUT .../files: what the host extracted. */
export const FilesPutResponse = z.object({ entries: z.number().int(), bytes: z.number().int() });

export const LogsResponse = z.object({ stdout: z.string(), stderr: z.string() });

/** The egress probe's result (protection 5). `findings` are EgressFindings lines. */
export const ProbeResult = z.object({
  ok: z.boolean(),
  findings: z.array(z.string()),
  network: z.record(z.string(), z.unknown()).optional(),
  services: z.array(z.record(z.string(), z.unknown())).optional(),
  duration_ms: z.number().optional(),
});
export type ProbeResult = z.infer<typeof ProbeResult>;

/** Client -> cp text frames of the exec stream WebSocket. */
export const ExecStreamClientFrame = z.discriminatedUnion("type", [
  z.object({ type: z.literal("start"), exec: ExecRequest }),
  z.object({ type: z.literal("stdin"), data: z.string() }),
  z.object({ type: z.literal("stdin_end") }),
]);
export type ExecStreamClientFrame = z.infer<typeof ExecStreamClientFrame>;

/** cp -> client text frames of the exec stream WebSocket; `exit` is last (its output fields are empty). */
export const ExecStreamServerFrame = z.discriminatedUnion("type", [
  z.object({ type: z.literal("stdout"), data: z.string() }),
  z.object({ type: z.literal("stderr"), data: z.string() }),
  z.object({ type: z.literal("exit"), result: ExecResponse }),
  z.object({ type: z.literal("error"), error: ErrorResponse.shape.error }),
]);
export type ExecStreamServerFrame = z.infer<typeof ExecStreamServerFrame>;
