import type { AgentPlan, EgressProbe, Plan } from "@denv/spec";
import { SandboxRecords } from "../sandbox-records.js";

/** An environment: one Daytona sandbox, whose one OS user is the agent's. */
export interface DaytonaEnvironmentRecord {
  /** PROJECT/ENV */
  id: string;
  project: string;
  name: string;
  sandboxId: string;
  /** The Daytona snapshot the sandbox was created from: the built one (a deploy) or a version's. */
  snapshot: string;
  /** The built snapshot's name (a deploy) or the version id (a fork). */
  image: string;
  plan: Plan;
  agent: AgentPlan;
  /** The sandbox's OS user (the agent's, as the file spells it) and the uid Daytona runs it as. */
  agentUser: string;
  agentUid: number;
  networkBlockAll: boolean;
  command: string;
  parentVersion?: string;
  timings: { create_ms: number; start_ms: number; health_ms: number; probe_ms: number; total_ms: number };
  probe: EgressProbe | { skipped: string };
  /** Stopped: Daytona stopped the sandbox (every process ended) until a start. */
  stopped?: boolean;
  testsTar?: string;
  createdAt: string;
}

/** A version: a Daytona snapshot of the environment's sandbox (its filesystem). */
export interface DaytonaVersionRecord {
  /** PROJECT@vN */
  id: string;
  project: string;
  number: number;
  snapshot: string;
  sourceEnvironment: string;
  parentVersion?: string;
  plan: Plan;
  agent: AgentPlan;
  agentUser: string;
  agentUid: number;
  networkBlockAll: boolean;
  command: string;
  testsTar?: string;
  timings: { snapshot_ms: number; total_ms: number };
  createdAt: string;
}

/** The Daytona runtime's records, and the snapshots it built (`denvd release` deletes them). */
export class DaytonaRecords extends SandboxRecords<DaytonaEnvironmentRecord, DaytonaVersionRecord> {
  static async open(stateDir: string): Promise<DaytonaRecords> {
    return new DaytonaRecords(await SandboxRecords.prepare(stateDir, "daytona"));
  }
}
