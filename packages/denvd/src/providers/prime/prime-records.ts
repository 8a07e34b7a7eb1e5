import type { AgentPlan, EgressProbe, Plan } from "@denv/spec";
import type { ImageDefaults } from "../dockerfile-steps.js";
import { SandboxRecords } from "../sandbox-records.js";

/**
 * An environment: one Prime sandbox per service, its commands run as any user of its image; with
 * several services, a Prime private network between their sandboxes.
 */
export interface PrimeEnvironmentRecord {
  /** PROJECT/ENV */
  id: string;
  project: string;
  name: string;
  /** The agent service's sandbox (exec, files, the egress probe and the verifier run here). */
  sandboxId: string;
  /** The other services' sandboxes and what each was made from (as `image`), by service name. */
  peers?: Record<string, { sandboxId: string; image: string }>;
  /** The private network the services' sandboxes share (several services only). */
  networkId?: string;
  /**
   * Each sandbox's own processes before any service started (Prime's and the init's), by sandbox
   * id (several services only): a snapshot's frozen window stops every other process.
   */
  systemProcs?: Record<string, string[]>;
  /** The built image's reference (a deploy) or the version id (a fork). */
  image: string;
  plan: Plan;
  /** What each service's Dockerfile runs, as whom, where (its start when compose says nothing). */
  imageDefaults?: Record<string, ImageDefaults>;
  /** The verifier's own image, when it is not the agent service's (it grades in a sandbox of it). */
  verifierImage?: string;
  agent: AgentPlan;
  /** The agent's user as the sandbox's passwd names it, and its uid there (never 0). */
  agentName: string;
  agentUid: number;
  /** The verifier's uid where it grades in this sandbox: the agent never acts as it. */
  verifierUid?: number;
  /** False: the sandbox's egress allowlist is empty (it reaches nothing). */
  networkAccess: boolean;
  command: string;
  parentVersion?: string;
  timings: { create_ms: number; start_ms: number; health_ms: number; probe_ms: number; total_ms: number };
  probe: EgressProbe | { skipped: string };
  /** Every process of the sandbox when it became ready ("pid:start time"): not the agent's. */
  baseline: string[];
  testsTar?: string;
  createdAt: string;
}

/** A version: a Prime checkpoint of each of the environment's sandboxes (their root filesystems). */
export interface PrimeVersionRecord {
  /** PROJECT@vN */
  id: string;
  project: string;
  number: number;
  /** The agent service's checkpoint. */
  checkpointId: string;
  /** The other services' checkpoints, by service name. */
  peerCheckpoints?: Record<string, string>;
  sourceEnvironment: string;
  parentVersion?: string;
  plan: Plan;
  imageDefaults?: Record<string, ImageDefaults>;
  verifierImage?: string;
  agent: AgentPlan;
  command: string;
  testsTar?: string;
  /** `frozen_ms`: the window every service's processes were stopped (several services). */
  timings: { snapshot_ms: number; frozen_ms?: number; total_ms: number };
  createdAt: string;
}

/** Every sandbox of the environment, the agent's first. */
export function sandboxesOf(rec: PrimeEnvironmentRecord): string[] {
  return [rec.sandboxId, ...Object.values(rec.peers ?? {}).map((p) => p.sandboxId)];
}

/** Every checkpoint of the version, the agent service's first. */
export function checkpointsOf(v: PrimeVersionRecord): string[] {
  return [v.checkpointId, ...Object.values(v.peerCheckpoints ?? {})];
}

/** The Prime runtime's records. */
export class PrimeRecords extends SandboxRecords<PrimeEnvironmentRecord, PrimeVersionRecord> {
  static async open(stateDir: string): Promise<PrimeRecords> {
    return new PrimeRecords(await SandboxRecords.prepare(stateDir, "prime"));
  }
}
