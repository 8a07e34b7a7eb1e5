import { z } from "zod";
import { TargetKindName } from "../targets.js";

/** The REST API's targets, their hosts and join tokens, and why placement chose a host. */

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

export const CreateTarget = z.object({
  name: z.string(),
  kind: TargetKind,
  /** The kind's settings (strings or JSON values), validated per kind. */
  settings: z.record(z.string(), z.unknown()).default({}),
  /** Secrets (API keys, cloud keys), stored encrypted and never returned. */
  credentials: z.record(z.string(), z.string()).default({}),
});

export const TargetList = z.object({ targets: z.array(Target) });

/** GET /v1/hosts: hosts per page when the request gives no `limit`, and the most it may ask for. */
export const HOSTS_PAGE = { default: 100, max: 1000 } as const;

/**
 * One page of GET /v1/hosts: hosts by id. `next` is there when more hosts follow: pass it as
 * `after` for the next page (it is the id of the last host on this one).
 */
export const HostList = z.object({ hosts: z.array(Host), next: z.string().optional() });
export const JoinTokenList = z.object({ join_tokens: z.array(JoinToken) });
