import { rm } from "node:fs/promises";
import type { AgentPlan, EgressProbe, Plan } from "@denv/spec";
import { writeFileAtomic } from "../../agent/atomic-file.js";
import { SandboxRecords } from "../sandbox-records.js";

/**
 * What the E2B runtime keeps of its environments and versions, one JSON file each under
 * `<stateDir>/e2b/`, written atomically: E2B holds the sandboxes and snapshots, these records
 * say which of them are denv's and what they are.
 */

/** An environment: one sandbox (E2B sandboxes are one container). */
export interface E2bEnvironmentRecord {
  /** PROJECT/ENV */
  id: string;
  project: string;
  name: string;
  sandboxId: string;
  /** What the sandbox was created from: the built template's id, or the version's snapshot id. */
  templateId: string;
  /** The template's alias (a deploy) or the version id (a fork). */
  image: string;
  plan: Plan;
  agent: AgentPlan;
  /** The name E2B runs the agent's commands as, and the uid it resolved to in the sandbox. */
  agentName: string;
  agentUid: number;
  /** The verifier's uid, when it grades in this sandbox (it reaches the services): never the agent's to act as. */
  verifierUid?: number;
  allowInternetAccess: boolean;
  command: string;
  parentVersion?: string;
  timings: { create_ms: number; probe_ms: number; total_ms: number };
  probe: EgressProbe | { skipped: string };
  /** Stopped: the sandbox is paused (E2B's pause) until a start resumes it. */
  paused?: boolean;
  /** Every process of the sandbox when it became ready ("pid:start time"): not the agent's. */
  baseline: string[];
  /** The verifier's tests, packed at deploy and kept on this host only (never in a sandbox). */
  testsTar?: string;
  /** The verifier's own template (x-denv.verifier.services: false): its sandbox is made from it. */
  verifierTemplate?: string;
  createdAt: string;
}

/** A version: an E2B snapshot of the environment's sandbox. */
export interface E2bVersionRecord {
  /** PROJECT@vN */
  id: string;
  project: string;
  number: number;
  snapshotId: string;
  sourceEnvironment: string;
  parentVersion?: string;
  plan: Plan;
  agent: AgentPlan;
  agentName: string;
  agentUid: number;
  allowInternetAccess: boolean;
  command: string;
  testsTar?: string;
  verifierTemplate?: string;
  /**
   * The agent's processes in the snapshot ("pid:start time", held still while it was taken): a
   * fork resumes them, and leaves them out of its baseline so that a verify of it stops them.
   */
  agentProcesses?: string[];
  timings: { snapshot_ms: number; total_ms: number };
  createdAt: string;
}

/** The E2B runtime's records, and the templates it built or used (`denvd release` deletes them). */
export class E2bRecords extends SandboxRecords<E2bEnvironmentRecord, E2bVersionRecord> {
  static async open(stateDir: string): Promise<E2bRecords> {
    const dir = await SandboxRecords.prepare(stateDir, "e2b", ["templates"]);
    return new E2bRecords(dir);
  }

  /** The templates this host built or used at E2B, by alias: `denvd release` deletes them. */
  async templates(): Promise<string[]> {
    return (await this.all<{ alias: string }>("templates")).map((t) => t.alias);
  }
  putTemplate(alias: string): Promise<void> {
    return writeFileAtomic(this.file("templates", alias), JSON.stringify({ alias }));
  }
  deleteTemplate(alias: string): Promise<void> {
    return rm(this.file("templates", alias), { force: true });
  }
}
