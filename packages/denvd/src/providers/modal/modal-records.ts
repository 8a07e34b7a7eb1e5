import type { AgentPlan, EgressProbe, Plan } from "@denv/spec";
import { SandboxRecords } from "../sandbox-records.js";
import type { ModalUser } from "./modal-exec.js";
import type { SandboxTimings } from "./modal-materialize.js";

/** An environment: one Modal sandbox of a built image or a version's snapshot. */
export interface ModalEnvironmentRecord {
  /** PROJECT/ENV */
  id: string;
  project: string;
  name: string;
  sandboxId: string;
  /** The image the sandbox started from (`im-…`): a build (a deploy) or a version's snapshot (a fork). */
  imageId: string;
  /** The user the Dockerfile named last: the service's when compose names none. */
  imageUser?: string;
  plan: Plan;
  agent: AgentPlan;
  /** The agent's user as the sandbox's passwd resolves it (its uid never 0). */
  agentUser: ModalUser;
  /** The verifier's uid where it grades in this sandbox: the agent never acts as it. */
  verifierUid?: number;
  /** False: the sandbox was created with `blockNetwork` (it reaches nothing). */
  networkAccess: boolean;
  /** Every process of the sandbox when it became ready ("pid:start time"): not the agent's. */
  baseline: string[];
  probe: EgressProbe | { skipped: string };
  timings: SandboxTimings;
  command: string;
  parentVersion?: string;
  testsTar?: string;
  createdAt: string;
}

/** A version: a filesystem snapshot of the environment's sandbox, an image Modal keeps. */
export interface ModalVersionRecord {
  /** PROJECT@vN */
  id: string;
  project: string;
  number: number;
  /** The snapshot's image (`im-…`): a fork's sandbox starts from it. */
  imageId: string;
  imageUser?: string;
  sourceEnvironment: string;
  parentVersion?: string;
  plan: Plan;
  agent: AgentPlan;
  command: string;
  testsTar?: string;
  timings: { snapshot_ms: number; total_ms: number };
  createdAt: string;
}

/** The Modal runtime's records. */
export class ModalRecords extends SandboxRecords<ModalEnvironmentRecord, ModalVersionRecord> {
  static async open(stateDir: string): Promise<ModalRecords> {
    return new ModalRecords(await SandboxRecords.prepare(stateDir, "modal"));
  }
}
