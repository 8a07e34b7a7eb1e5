import { z } from "zod";
import { MAX_TTL_SEC, PlacementEvidence } from "./api/hosts.js";
import { ExecRequest } from "./exec.js";
import { GitRef } from "./github.js";
import { MAX_POOL_SIZE } from "./messages.js";
import { DeploymentKind, PhaseName } from "./phases.js";

export * from "./api/hosts.js";

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
