import { mkdir, readdir, readFile, rm } from "node:fs/promises";
import { join } from "node:path";
import type { AgentPlan, EgressProbe, Plan } from "@denv/spec";
import { writeFileAtomic } from "../../agent/atomic-file.js";

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

export class E2bRecords {
  private constructor(private readonly dir: string) {}

  static async open(stateDir: string): Promise<E2bRecords> {
    const dir = join(stateDir, "e2b");
    await mkdir(join(dir, "environments"), { recursive: true, mode: 0o700 });
    await mkdir(join(dir, "versions"), { recursive: true, mode: 0o700 });
    await mkdir(join(dir, "tests"), { recursive: true, mode: 0o700 });
    await mkdir(join(dir, "templates"), { recursive: true, mode: 0o700 });
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

  /** Where the verifiers' tests are kept, one archive per deploy (named after its command). */
  get testsDir(): string {
    return join(this.dir, "tests");
  }

  /** The tests archives no environment or version names. */
  async unreferencedTests(): Promise<string[]> {
    const used = new Set([...(await this.environments()), ...(await this.versions())].map((r) => r.testsTar));
    return (await readdir(this.testsDir)).map((f) => join(this.testsDir, f)).filter((f) => !used.has(f));
  }

  environments(): Promise<E2bEnvironmentRecord[]> {
    return this.all<E2bEnvironmentRecord>("environments");
  }
  versions(): Promise<E2bVersionRecord[]> {
    return this.all<E2bVersionRecord>("versions");
  }
  getEnvironment(id: string): Promise<E2bEnvironmentRecord | undefined> {
    return this.get<E2bEnvironmentRecord>("environments", id);
  }
  getVersion(id: string): Promise<E2bVersionRecord | undefined> {
    return this.get<E2bVersionRecord>("versions", id);
  }
  putEnvironment(rec: E2bEnvironmentRecord): Promise<void> {
    return writeFileAtomic(this.file("environments", rec.id), JSON.stringify(rec, null, 2));
  }
  putVersion(rec: E2bVersionRecord): Promise<void> {
    return writeFileAtomic(this.file("versions", rec.id), JSON.stringify(rec, null, 2));
  }
  deleteEnvironment(id: string): Promise<void> {
    return rm(this.file("environments", id), { force: true });
  }
  deleteVersion(id: string): Promise<void> {
    return rm(this.file("versions", id), { force: true });
  }

  /** Ids hold `/` and `@`: the file name is the id, percent-encoded. */
  private file(kind: string, id: string): string {
    return join(this.dir, kind, `${encodeURIComponent(id)}.json`);
  }

  private async get<T>(kind: string, id: string): Promise<T | undefined> {
    try {
      return JSON.parse(await readFile(this.file(kind, id), "utf8")) as T;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === "ENOENT") return undefined;
      throw err;
    }
  }

  private async all<T>(kind: string): Promise<T[]> {
    const out: T[] = [];
    for (const name of (await readdir(join(this.dir, kind))).sort()) {
      if (!name.endsWith(".json")) continue;
      const rec = await this.get<T>(kind, decodeURIComponent(name.slice(0, -".json".length)));
      if (rec) out.push(rec);
    }
    return out;
  }
}
