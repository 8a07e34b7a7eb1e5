import { z } from "zod";

/**
 * The normalized plan of an environment: what the compose validator produces from a compose
 * file and what denvd deploys. Every accepted compose key lands here; nothing is dropped.
 */

export const ProjectKind = z.enum(["rl-environment", "service"]);
export type ProjectKind = z.infer<typeof ProjectKind>;

export const Resources = z.object({
  /** Memory limit in bytes. */
  memoryBytes: z.number().int().positive(),
  /** CPU limit in cores (fractional allowed). */
  cpus: z.number().positive(),
  /** Maximum number of processes. */
  pids: z.number().int().positive(),
});
export type Resources = z.infer<typeof Resources>;

/** Disk caps: a full disk is the environment's own ENOSPC (or EDQUOT), never the host's. */
export const DiskCaps = z.object({
  /** Cap of each named volume, in bytes. */
  volumeBytes: z.number().int().positive(),
  /** Cap of each service's writable layer, in bytes. */
  layerBytes: z.number().int().positive(),
  /** The caps the file gave: a host that cannot enforce one of them refuses the file. */
  explicit: z.array(z.enum(["volumes", "layers"])),
});
export type DiskCaps = z.infer<typeof DiskCaps>;

export const Healthcheck = z.object({
  /** Docker form: ["CMD", ...] or ["CMD-SHELL", "..."] or ["NONE"]. */
  test: z.array(z.string()),
  intervalMs: z.number().int().nonnegative().optional(),
  timeoutMs: z.number().int().nonnegative().optional(),
  retries: z.number().int().nonnegative().optional(),
  startPeriodMs: z.number().int().nonnegative().optional(),
  /** Interval between checks during the start period (compose `start_interval`). */
  startIntervalMs: z.number().int().nonnegative().optional(),
});
export type Healthcheck = z.infer<typeof Healthcheck>;

export const DependsOn = z.object({
  service: z.string(),
  condition: z.enum(["service_started", "service_healthy", "service_completed_successfully"]),
});
export type DependsOn = z.infer<typeof DependsOn>;

export const VolumeMount = z.object({
  /** Name of a named volume declared at the top level. */
  source: z.string(),
  target: z.string(),
  readOnly: z.boolean(),
});
export type VolumeMount = z.infer<typeof VolumeMount>;

export const Build = z.object({
  /** Build context, relative to the project directory (never outside it). */
  context: z.string(),
  /** Dockerfile path relative to the context. */
  dockerfile: z.string(),
  args: z.record(z.string(), z.string()),
  target: z.string().optional(),
});
export type Build = z.infer<typeof Build>;

export const PortPublish = z.object({
  target: z.number().int(),
  published: z.number().int().optional(),
  protocol: z.enum(["tcp", "udp"]),
  /** Host address to bind (compose `host_ip`); absent = all addresses. */
  hostIp: z.string().optional(),
});
export type PortPublish = z.infer<typeof PortPublish>;

export const ServicePlan = z.object({
  name: z.string(),
  /** Image reference; for a `build:` service, the tag denv builds (derived when absent). */
  image: z.string(),
  build: Build.optional(),
  /** Exec form (argv) or shell form (string), as in compose. */
  command: z.union([z.array(z.string()), z.string()]).optional(),
  entrypoint: z.union([z.array(z.string()), z.string()]).optional(),
  environment: z.record(z.string(), z.string()),
  workingDir: z.string().optional(),
  user: z.string().optional(),
  volumes: z.array(VolumeMount),
  /** tmpfs mount targets (optionally "path:options"). */
  tmpfs: z.array(z.string()),
  dependsOn: z.array(DependsOn),
  healthcheck: Healthcheck.optional(),
  expose: z.array(z.number().int()),
  labels: z.record(z.string(), z.string()),
  init: z.boolean().optional(),
  stopGracePeriodMs: z.number().int().nonnegative().optional(),
  restart: z.enum(["no", "always", "on-failure", "unless-stopped"]).optional(),
  /** Maximum restarts for `on-failure:N`. */
  restartMaxRetries: z.number().int().nonnegative().optional(),
  capDrop: z.array(z.string()),
  /** `security_opt: [no-new-privileges:true]`; every service of an rl-environment gets it anyway. */
  noNewPrivileges: z.boolean().optional(),
  /** `none` isolates the service from every network. */
  networkMode: z.literal("none").optional(),
  /** Aliases on the environment network (service name is always one). */
  aliases: z.array(z.string()),
  resources: Resources,
  /** Published ports: `service` projects only. */
  ports: z.array(PortPublish),
  /** Resolver options, e.g. ["timeout:1", "attempts:1"]. */
  dnsOpt: z.array(z.string()),
  hostname: z.string().optional(),
  /** Image platform, e.g. "linux/amd64" (compose `platform`); absent = the host's platform. */
  platform: z.string().optional(),
});
export type ServicePlan = z.infer<typeof ServicePlan>;

export const VerifierPlan = z.object({
  image: z.string(),
  build: Build.optional(),
  command: z.union([z.array(z.string()), z.string()]),
  /** Seconds before the verifier is killed. */
  timeoutSec: z.number().int().positive(),
  /** deny (default), or mirrors: the host's package mirrors through denvd's proxy, while it runs. */
  egress: z.enum(["deny", "mirrors"]).optional(),
  /** Project-relative folder copied only into the verifier's container, at /tests. */
  tests: z.string().optional(),
  /** Absolute paths in the agent service collected from the fork into /submission. */
  submission: z.array(z.string()),
  /** The verifier's own non-root user (uid[:gid]). */
  user: z.string(),
  environment: z.record(z.string(), z.string()),
  resources: Resources,
  /**
   * x-denv.verifier.smoke: every deploy grades its new version once, untouched, on a fork;
   * `expect`: the reward it must get, or the deploy fails before alpha switches.
   */
  smoke: z.object({ expect: z.number().optional() }).optional(),
  /**
   * x-denv.verifier.services: false: the verifier needs none of the fork's services, only its
   * files. The verify's fork is created from the snapshot (its containers, volumes and network)
   * but no service of it is started, and the verifier runs with no network at all.
   */
  services: z.literal(false).optional(),
});
export type VerifierPlan = z.infer<typeof VerifierPlan>;

/** A sandbox that confines the agent service beyond the container (x-denv.agent.sandbox). */
export const AgentSandbox = z.enum(["gvisor"]);
export type AgentSandbox = z.infer<typeof AgentSandbox>;

/**
 * Capabilities a sandboxed agent may add to gVisor's kernel (x-denv.agent.capabilities): under
 * gVisor they are capabilities of the sandbox's own kernel, never the host's. SYS_ADMIN lets a
 * root agent build namespaces (Karotte's per-session PID namespace), SYS_PTRACE lets it read its
 * children's /proc (Karotte's memory watchdog).
 */
export const SandboxCapability = z.enum(["SYS_ADMIN", "SYS_PTRACE"]);
export type SandboxCapability = z.infer<typeof SandboxCapability>;

export const AgentPlan = z.object({
  service: z.string(),
  /** The user exec defaults to (name or uid[:gid]); root only inside a `sandbox`. */
  user: z.string(),
  workdir: z.string(),
  /** gvisor: the agent service runs under gVisor's runsc, and the agent may be root in it. */
  sandbox: AgentSandbox.optional(),
  /** Added to the sandboxed agent's set (only with a `sandbox`). */
  capabilities: z.array(SandboxCapability).optional(),
});
export type AgentPlan = z.infer<typeof AgentPlan>;

export const Plan = z.object({
  name: z.string(),
  kind: ProjectKind,
  /** Services in start order (dependencies first). */
  services: z.array(ServicePlan),
  /** Named volumes of the environment. */
  volumes: z.array(z.string()),
  agent: AgentPlan,
  verifier: VerifierPlan.optional(),
  /** deny; mirrors: the host's package mirrors through denvd's proxy, nothing else; allow (service). */
  egress: z.enum(["deny", "mirrors", "allow"]),
  /** Volumes captured by snapshots (default: all). */
  snapshotVolumes: z.array(z.string()),
  placement: z.record(z.string(), z.string()),
  /** Disk caps (x-denv.disk); absent in plans recorded before they existed. */
  disk: DiskCaps.optional(),
  /** Warm forks of the project's current version kept ready for sandboxes (x-denv.pool). */
  pool: z.number().int().nonnegative().optional(),
  /** Notes for the user (e.g. obsolete `version` ignored). Never silent drops. */
  notes: z.array(z.string()),
});
export type Plan = z.infer<typeof Plan>;
