import { ControlPlaneMessages, DenvError, type Version } from "@denv/spec";
import type { HostHub } from "../hub/hub.js";
import { newId } from "../ids.js";
import { errorMessage, type Log } from "../log.js";
import type { VersionRecord } from "../store/records.js";
import type { Store } from "../store/store.js";
import { assertScope, NotFound, type Principal } from "./access.js";
import { presentVersion } from "./present.js";

export interface VersionServiceOptions {
  /** Keep the newest N versions per project (0 = keep all). */
  retain: number;
  commandTimeoutMs: number;
}

/**
 * Versions: the cp holds their metadata, their snapshots live on the hosts holding a replica
 * (the one that captured it, and those it was sent to). Deleting one frees every holder's disk;
 * a version an environment runs from is kept.
 */
export class VersionService {
  constructor(
    private readonly store: Store,
    private readonly hub: HostHub,
    private readonly log: Log,
    private readonly options: VersionServiceOptions,
  ) {}

  async list(p: Principal, project: string): Promise<Version[]> {
    assertScope(p, project, () => NotFound.project(project));
    if (!(await this.store.getProject(project))) throw NotFound.project(project);
    const versions = await this.store.listVersions(project);
    return Promise.all(versions.map(async (v) => presentVersion(v, await this.store.listReplicas(v.id))));
  }

  async get(p: Principal, project: string, number: number): Promise<Version> {
    const v = await this.require(p, project, number);
    return presentVersion(v, await this.store.listReplicas(v.id));
  }

  async delete(p: Principal, project: string, number: number): Promise<void> {
    const v = await this.require(p, project, number);
    const users = await this.usersOf(v);
    if (users.length > 0) throw new DenvError("conflict", ControlPlaneMessages.versionInUse(v.id, users));
    await this.remove(v);
  }

  /** Retention: beyond the newest N, versions no environment runs from are deleted. */
  async applyRetention(project: string): Promise<void> {
    if (this.options.retain <= 0) return;
    const old = (await this.store.listVersions(project)).slice(this.options.retain);
    for (const v of old) {
      if ((await this.usersOf(v)).length > 0) continue;
      try {
        await this.remove(v);
        this.log.info("retention deleted a version", { version: v.id, host: v.host_id });
      } catch (err) {
        // An offline host keeps the version until a later run of the policy reaches it.
        this.log.warn("retention could not delete a version", { version: v.id, error: errorMessage(err) });
      }
    }
  }

  /** Every version of a project (the project is being deleted); best effort on the hosts. */
  async removeAll(project: string): Promise<void> {
    for (const v of await this.store.listVersions(project)) {
      await this.remove(v).catch((err: unknown) => {
        this.log.warn("could not delete a version on its host", { version: v.id, error: errorMessage(err) });
        return this.store.deleteVersion(v.id);
      });
    }
  }

  private async require(p: Principal, project: string, number: number): Promise<VersionRecord> {
    const id = `${project}@v${number}`;
    assertScope(p, project, () => NotFound.version(id));
    const v = await this.store.getVersion(project, number);
    if (!v) throw NotFound.version(id);
    return v;
  }

  private async usersOf(v: VersionRecord): Promise<string[]> {
    const envs = await this.store.listEnvironments({ project: v.project });
    return envs.filter((e) => e.version === v.id || e.parentVersion === v.id).map((e) => e.id);
  }

  /**
   * Deletes the version on every host holding it, forgetting each replica as its host confirms
   * (or says it has none), and the version once none is left. A holder that is offline or fails
   * keeps its replica, and the version, for a later try; its error is raised.
   */
  private async remove(v: VersionRecord): Promise<void> {
    const holders = await this.store.listReplicas(v.id);
    const outcomes = await Promise.allSettled(
      holders.map(async (host) => {
        try {
          await this.hub.send(
            host,
            "version.delete",
            { version: v.id },
            { id: newId("cmd"), timeoutMs: this.options.commandTimeoutMs, durable: false },
          );
        } catch (err) {
          // The host no longer has it: its replica goes too.
          if (!(err instanceof DenvError && err.code === "not_found")) throw err;
        }
        await this.store.deleteReplica(v.id, host);
      }),
    );
    const failed = outcomes.flatMap((o) => (o.status === "rejected" ? [o.reason as unknown] : []));
    if (failed.length > 0) throw failed[0];
    await this.store.deleteVersion(v.id);
  }
}
