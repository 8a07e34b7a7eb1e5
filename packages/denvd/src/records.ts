import { mkdir, readdir, readFile, rename, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import type { Plan } from "@denv/spec";
import type { StoreMethod } from "./volume-store.js";

/** What a host holds, persisted as one JSON file per record (written atomically). */

export interface ImageRecord {
  /** Reference containers are created from. */
  image: string;
  imageId: string;
  repoDigests: string[];
  layers: number;
  squashed?: boolean;
}

export interface EnvironmentRecord {
  id: string;
  project: string;
  name: string;
  plan: Plan;
  status: "running" | "stopped" | "failed";
  /** The version this environment was forked from (absent for a deploy). */
  parentVersion?: string;
  command: string;
  network: { id: string; name: string; subnet: string; gateway: string };
  containers: Record<string, string>;
  volumes: Record<string, { docker: string; store: string }>;
  images: Record<string, ImageRecord>;
  verifierImage?: ImageRecord;
  /** Tar of the verifier's tests folder, kept on the host only. */
  testsTar?: string;
  /**
   * Processes running when the environment became ready: [host pid, start time]; for the
   * sandboxed agent service [sandbox pid, 0] (see host/runsc.ts).
   */
  baseline: Record<string, Array<[number, number]>>;
  /** The engine runtime of the sandboxed agent service (x-denv.agent.sandbox), e.g. runsc. */
  agentRuntime?: string;
  /** x-denv.egress: mirrors: the port of the environment's mirror proxy on its gateway. */
  egressProxyPort?: number;
  createdAt: string;
  evidence: Record<string, unknown>;
}

export interface VersionRecord {
  id: string;
  project: string;
  number: number;
  sourceEnvironment: string;
  parentVersion?: string;
  plan: Plan;
  images: Record<string, ImageRecord>;
  verifierImage?: ImageRecord;
  testsTar?: string;
  volumes: Record<string, { snapshot: string; bytes: number }>;
  method: StoreMethod;
  timings: {
    flushMs: number;
    frozenMs: number;
    commitMs: number;
    volumesMs: number;
    squashMs: number;
    totalMs: number;
  };
  sizes: { layerBytes: number; volumeBytes: number };
  createdAt: string;
  /** The host it was transferred from (absent: snapshotted here). */
  receivedFrom?: string;
}

function fileName(id: string): string {
  return `${id.replace(/[/@]/g, "_")}.json`;
}

export class RecordStore {
  constructor(private readonly dir: string) {}

  async init(): Promise<void> {
    await mkdir(join(this.dir, "environments"), { recursive: true });
    await mkdir(join(this.dir, "versions"), { recursive: true });
  }

  private async put(kind: string, id: string, value: unknown): Promise<void> {
    const path = join(this.dir, kind, fileName(id));
    await writeFile(`${path}.tmp`, JSON.stringify(value, null, 2));
    await rename(`${path}.tmp`, path);
  }

  private async get<T>(kind: string, id: string): Promise<T | undefined> {
    try {
      return JSON.parse(await readFile(join(this.dir, kind, fileName(id)), "utf8")) as T;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === "ENOENT") return undefined;
      throw err;
    }
  }

  /**
   * Every record of a kind. One deleted between the listing and its read (an environment destroyed
   * meanwhile) is not one of them: at 32 episodes in flight, a verify's fork went while another
   * command listed the environments, and that command failed on ENOENT.
   */
  private async all<T>(kind: string): Promise<T[]> {
    const names = (await readdir(join(this.dir, kind))).filter((n) => n.endsWith(".json"));
    const read = await Promise.all(
      names.map(async (n) => {
        try {
          return JSON.parse(await readFile(join(this.dir, kind, n), "utf8")) as T;
        } catch (err) {
          if ((err as NodeJS.ErrnoException).code === "ENOENT") return undefined;
          throw err;
        }
      }),
    );
    return read.filter((r): r is Awaited<T> => r !== undefined);
  }

  putEnvironment(r: EnvironmentRecord): Promise<void> {
    return this.put("environments", r.id, r);
  }
  getEnvironment(id: string): Promise<EnvironmentRecord | undefined> {
    return this.get("environments", id);
  }
  environments(): Promise<EnvironmentRecord[]> {
    return this.all("environments");
  }
  async deleteEnvironment(id: string): Promise<void> {
    await rm(join(this.dir, "environments", fileName(id)), { force: true });
  }

  putVersion(r: VersionRecord): Promise<void> {
    return this.put("versions", r.id, r);
  }
  getVersion(id: string): Promise<VersionRecord | undefined> {
    return this.get("versions", id);
  }
  versions(): Promise<VersionRecord[]> {
    return this.all("versions");
  }
  async deleteVersion(id: string): Promise<void> {
    await rm(join(this.dir, "versions", fileName(id)), { force: true });
  }
}
