import { z } from "zod";
import { PhaseName } from "../phases.js";

/**
 * Evidence: what a host reports when a phase ends (a `progress` frame with `ended`), and what it
 * records of an environment and of an episode. It is what the dashboard and the GitHub check
 * run show, so every key is snake_case like the rest of the API, and both sides validate it
 * with these schemas. docs/reference/deployments.md lists it per phase.
 */

const Ms = z.number().nonnegative();
const Count = z.number().int().nonnegative();
/** Service name -> an id (image id, container id). */
const ByService = z.record(z.string(), z.string());

/** The egress probe's report (protection 5); `findings` are EgressFindings lines. */
export const EgressProbe = z.object({
  ok: z.boolean(),
  findings: z.array(z.string()),
  network: z.object({ name: z.string(), internal: z.boolean(), reject_rule: z.boolean() }),
  services: z.array(
    z.object({
      service: z.string(),
      routes: z.array(z.string()),
      default_route: z.boolean(),
      route_out: z.boolean(),
      canary_reached: z.boolean(),
      /**
       * The service whose connect to the canary answers for this one: itself, or one on the
       * same path to the gateway (absent in older evidence: each service connected).
       */
      canary_from: z.string().optional(),
      nameservers: z.array(z.string()),
      networks: z.array(z.string()),
    }),
  ),
  duration_ms: Ms,
});
export type EgressProbe = z.infer<typeof EgressProbe>;

/** A probe that did not run: egress is allowed (a `service` project). */
export const ProbeEvidence = z.union([EgressProbe, z.object({ skipped: z.string() })]);
export type ProbeEvidence = z.infer<typeof ProbeEvidence>;

/** One request a build made through denvd's mirror proxy (status 403: refused). */
export const ProxyRequest = z.object({
  method: z.string(),
  host: z.string(),
  /** Path of a plain HTTP request; "" for CONNECT. */
  path: z.string(),
  status: z.number().int(),
  bytes: Count,
});

/**
 * Where the builds ran and what they fetched: an rl-environment's builds run on a build network
 * whose only way out is the mirror proxy; a `service` project's on the engine's bridge.
 */
export const BuildEvidence = z.union([
  z.object({ network: z.string(), mirrors: z.array(z.string()).readonly(), requests: z.array(ProxyRequest) }),
  z.object({ network: z.literal("bridge") }),
]);

/** A disk cap (x-denv.disk or the default) and whether this host enforces it, and how. */
const DiskCap = z.object({ cap_bytes: Count, enforced: z.boolean(), by: z.string() });

/** What an environment's host recorded when it stood the environment up (or started it again). */
/** Protection 1 as it applied: who the agent is, and what confines it. */
export const AgentEvidence = z.object({
  service: z.string(),
  user: z.string(),
  /** The uid the user resolved to in the image (null: a name its passwd lacks). */
  uid: z.number().int().nullable(),
  root: z.boolean(),
  /** container: never root, no capability effective; gvisor: root only in gVisor's kernel. */
  confinement: z.enum(["container", "gvisor"]),
  /** The engine runtime that confined it (gvisor). */
  runtime: z.string().optional(),
  /** Capabilities of the sandbox's kernel added to the agent's set (x-denv.agent.capabilities). */
  capabilities: z.array(z.string()).optional(),
});
export type AgentEvidence = z.infer<typeof AgentEvidence>;

/** Egress as it applied to the agent's episode (protection 5). */
export const EgressEvidence = z.object({
  mode: z.enum(["deny", "mirrors", "allow"]),
  /** mirrors: the hosts the proxy forwards to, and its address on the environment's network. */
  mirrors: z.array(z.string()).optional(),
  proxy: z.string().optional(),
});
export type EgressEvidence = z.infer<typeof EgressEvidence>;

/**
 * One service's start, in ms since the environment's materialisation began: when denvd asked the
 * engine to start it (its `depends_on` conditions held), when the engine had started it, and when
 * it was ready (its default route gone, and healthy, or running without a healthcheck, or a
 * one-shot exited 0).
 */
export const ServiceStartTimes = z.object({
  service: z.string(),
  start_ms: Ms,
  running_ms: Ms,
  ready_ms: Ms,
});
export type ServiceStartTimes = z.infer<typeof ServiceStartTimes>;

/**
 * How long standing an environment up took. `create_ms`, `start_ms`, `health_ms`, `probe_ms`
 * follow one another and add up to about `total_ms`; the optional keys (absent in older records)
 * split `create_ms` into spans that overlap (the firewall rule goes in while volumes and
 * containers are created), give the process baseline's time and each service's start.
 */
export const EnvironmentTimings = z.object({
  create_ms: Ms,
  start_ms: Ms,
  health_ms: Ms,
  probe_ms: Ms,
  total_ms: Ms,
  network_ms: Ms.optional(),
  firewall_ms: Ms.optional(),
  volumes_ms: Ms.optional(),
  containers_ms: Ms.optional(),
  baseline_ms: Ms.optional(),
  services: z.array(ServiceStartTimes).optional(),
});

export const EnvironmentEvidence = z.object({
  placement: z.object({ host: z.string(), reason: z.string() }),
  network: z.object({ name: z.string(), subnet: z.string(), internal: z.boolean() }),
  volumes: z.object({ method: z.string(), from: z.string().nullable() }),
  images: ByService,
  timings: EnvironmentTimings,
  probe: ProbeEvidence,
  /** Absent when nothing was built (every image pulled, or a fork). */
  build: BuildEvidence.optional(),
  /** The caps of live volumes and writable layers (absent in records from before disk caps). */
  disk: z.object({ volumes: DiskCap, layers: DiskCap }).optional(),
  /** Protection 1's evidence; absent for a service project and in older records. */
  agent: AgentEvidence.optional(),
  /** Protection 5's policy; absent in older records (deny). */
  egress: EgressEvidence.optional(),
  /** The sum of its services' caps (protection 4): what placement counts it as using on this host. */
  caps: z.object({ memory_bytes: Count, cpus: z.number().nonnegative(), pids: Count }).optional(),
});
export type EnvironmentEvidence = z.infer<typeof EnvironmentEvidence>;

export const VersionSizes = z.object({ layer_bytes: Count, volume_bytes: Count });

/** How long each step of a snapshot took; `frozen_ms` is the window the services were paused. */
export const VersionTimings = z.object({
  flush_ms: Ms,
  frozen_ms: Ms,
  commit_ms: Ms,
  volumes_ms: Ms,
  squash_ms: Ms,
  total_ms: Ms,
});

export const AgentStopped = z.object({ killed: Count, survivors: Count });

/** An episode's snapshot, as the verify reports it. */
export const EpisodeSnapshot = z.object({
  version: z.string(),
  method: z.string(),
  frozen_ms: Ms,
  total_ms: Ms,
});

/** A mirror proxy's allow-list and every request it saw (evidence of egress by phase). */
export const MirrorRequests = z.object({
  mirrors: z.array(z.string()).readonly(),
  requests: z.array(ProxyRequest),
});

/** The verifier's own container and how its run went (`exit_code` null when it timed out). */
export const VerifierEvidence = z.object({
  container_id: z.string(),
  image: z.string(),
  user: z.string(),
  exit_code: z.number().int().nullable(),
  timed_out: z.boolean(),
  duration_ms: Ms,
  /** x-denv.verifier.egress: mirrors — what the proxy allowed and every request it saw. */
  egress: MirrorRequests.optional(),
  /**
   * What kept the verifier apart from the agent where it has no container of its own (a hosted
   * provider's single sandbox): e.g. "e2b: the fork's sandbox, as uid 1001". Absent on denvd's own
   * runtime, where `container_id` is the verifier's own container.
   */
  isolation: z.string().optional(),
});

/** One submission path copied out of the fork, or a path that was not there. */
export const SubmissionEntry = z.union([
  z.object({ path: z.string(), entries: Count, bytes: Count }),
  z.object({ path: z.string(), missing: z.literal(true) }),
]);
export type SubmissionEntry = z.infer<typeof SubmissionEntry>;

/** The evidence of a verify result (protection 2), whatever its grade. */
export const VerifyEvidence = z.object({
  /** Absent for a smoke verify (no agent ran in the version it grades). */
  agent: AgentStopped.optional(),
  snapshot: EpisodeSnapshot,
  fork: z.object({ environment: z.string(), probe: ProbeEvidence }),
  submission: z.array(SubmissionEntry),
  verifier: VerifierEvidence,
  /** x-denv.egress: mirrors: what the agent's episode fetched through the mirror proxy. */
  agent_egress: MirrorRequests.optional(),
  /** A refused submission stops the episode early: only `total_ms` then. */
  timings: z.object({
    stop_agent_ms: Ms.optional(),
    snapshot_ms: Ms.optional(),
    fork_ms: Ms.optional(),
    prepare_ms: Ms.optional(),
    run_ms: Ms.optional(),
    total_ms: Ms,
  }),
});
export type VerifyEvidence = z.infer<typeof VerifyEvidence>;

/** The phases a host runs and reports; `switch`, `transfer` and `smoke verify` are the control plane's alone. */
export const HostPhaseName = PhaseName.exclude(["switch", "transfer", "smoke verify"]);
export type HostPhaseName = z.infer<typeof HostPhaseName>;

/** What a host reports when each of its phases ends. */
export const PhaseEvidence = {
  "resolve source": z.object({
    source: z.object({ entries: Count, bytes: Count, compressed: z.boolean() }),
    /** A deploy from git: what the host fetched (one commit, shallow) before it took the tree. */
    git: z.object({ url: z.string(), commit: z.string(), fetched_bytes: Count }).optional(),
  }),
  /** The services of the validated plan, in start order, and the agent service. */
  validate: z.object({
    services: z.array(z.string()),
    agent: z.string(),
    /** x-denv.pool, when the file asks for warm forks. */
    pool: z.number().int().nonnegative().optional(),
    /** x-denv.verifier.smoke, when the file asks for a smoke verify of each deploy. */
    smoke: z.object({ expect: z.number().optional() }).optional(),
  }),
  /** Image id per service, and where the builds ran (absent when nothing was built). */
  build: z.object({ digests: ByService, builds: BuildEvidence.optional() }),
  place: z.object({ host: z.string() }),
  restore: z.object({ version: z.string(), method: z.string() }),
  /** Container id per service. */
  start: z.object({ containers: ByService }),
  /** The services that passed their healthcheck (or, one-shots, completed). */
  health: z.object({ services: z.array(z.string()) }),
  probe: ProbeEvidence,
  snapshot: EpisodeSnapshot,
  /** The services paused (those that were running). */
  freeze: z.object({ paused: z.array(z.string()) }),
  /** The services whose writable layer was committed. */
  "capture layers": z.object({ committed: z.array(z.string()) }),
  /** The volumes snapshotted. */
  "capture volumes": z.object({ volumes: z.array(z.string()) }),
  thaw: z.object({ frozen_ms: Ms }),
  record: z.object({ version: z.string(), method: z.string(), sizes: VersionSizes, timings: VersionTimings }),
  "stop agent": AgentStopped,
  /**
   * The fork the verifier grades on; `services` "not started" with x-denv.verifier.services:
   * false (its files only; the verifier has no network).
   */
  fork: z.object({ environment: z.string(), services: z.enum(["started", "not started"]).optional() }),
  "run verifier": VerifierEvidence,
  /** The main reward; null when the verifier wrote none. */
  collect: z.object({ reward: z.number().nullable() }),
  /** What the episode removed after grading. */
  "clean up": z.object({ removed: z.array(z.string()) }),
  /** The services stopped, in stop order. */
  stop: z.object({ stopped: z.array(z.string()) }),
  /** The services and volumes removed. */
  destroy: z.object({ services: z.array(z.string()), volumes: z.array(z.string()) }),
  /** The service's address on the environment's network. */
  connect: z.object({ address: z.string() }),
  connected: z.object({ bytes_to_service: Count, bytes_from_service: Count }),
} satisfies Record<HostPhaseName, z.ZodType>;

/** The evidence of phase P, as a host builds it. */
export type PhaseEvidence<P extends HostPhaseName> = z.input<(typeof PhaseEvidence)[P]>;
