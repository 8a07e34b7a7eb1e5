import type { AgentPlan, EgressProbe, Plan } from "@denv/spec";
import { SandboxRecords } from "../sandbox-records.js";

/** An environment: one Prime sandbox, its commands run as any user of its image. */
export interface PrimeEnvironmentRecord {
  /** PROJECT/ENV */
  id: string;
  project: string;
  name: string;
  sandboxId: string;
  /** The built image's reference (a deploy) or the version id (a fork). */
  image: string;
  plan: Plan;
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

/** A version: a Prime checkpoint of the environment's sandbox (its root filesystem). */
export interface PrimeVersionRecord {
  /** PROJECT@vN */
  id: string;
  project: string;
  number: number;
  checkpointId: string;
  sourceEnvironment: string;
  parentVersion?: string;
  plan: Plan;
  agent: AgentPlan;
  command: string;
  testsTar?: string;
  timings: { snapshot_ms: number; total_ms: number };
  createdAt: string;
}

/** The Prime runtime's records. */
export class PrimeRecords extends SandboxRecords<PrimeEnvironmentRecord, PrimeVersionRecord> {
  static async open(stateDir: string): Promise<PrimeRecords> {
    return new PrimeRecords(await SandboxRecords.prepare(stateDir, "prime"));
  }
}
