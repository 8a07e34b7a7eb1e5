import { ControlPlaneMessages, DenvError, HostMessages } from "@denv/spec";
import type { HostHub } from "../hub/hub.js";
import type { HostRecord, VersionRecord } from "../store/records.js";
import type { Store } from "../store/store.js";

export type PlacementRequest =
  /** A new build: any fitting host of the target. */
  | {
      target: string;
      project: string;
      /** Placement labels the host must carry (x-denv placement labels, when known). */
      labels?: Record<string, string>;
    }
  /** Fork and rollback: the version must be restored where its snapshot lives. */
  | { version: VersionRecord };

export interface Placement {
  hostId: string;
  reason: string;
  candidates: Array<{ host: string; environments: number; memory_bytes?: number; excluded?: string }>;
}

/**
 * Picks a host: online hosts of the target that are not draining, carrying the wanted labels; a
 * version pins its own
 * host (snapshot locality); otherwise a host holding the project's newest version is preferred
 * (its layers are local), then the host with the most memory per environment.
 */
export class Placer {
  constructor(
    private readonly store: Store,
    private readonly hub: HostHub,
  ) {}

  async place(req: PlacementRequest): Promise<Placement> {
    if ("version" in req) return this.atVersion(req.version);
    const hosts = await this.store.listHosts({ target: req.target });
    const candidates: Placement["candidates"] = [];
    const eligible: Array<{ host: HostRecord; environments: number; score: number }> = [];
    const counts = await this.store.countEnvironmentsByHost();
    for (const host of hosts) {
      const environments = counts.get(host.id) ?? 0;
      const row = {
        host: host.id,
        environments,
        ...(host.capacity ? { memory_bytes: host.capacity.memory_bytes } : {}),
      };
      const missing = Object.entries(req.labels ?? {}).find(([k, v]) => host.labels[k] !== v);
      if (!this.hub.isOnline(host.id)) candidates.push({ ...row, excluded: "offline" });
      else if (host.drainingAt !== undefined) candidates.push({ ...row, excluded: "draining" });
      else if (missing) candidates.push({ ...row, excluded: `no label ${missing[0]}=${missing[1]}` });
      else {
        candidates.push(row);
        eligible.push({ host, environments, score: (host.capacity?.memory_bytes ?? 0) / (1 + environments) });
      }
    }
    if (eligible.length === 0) {
      // Online hosts exist, and the drain (not a label) is what keeps every one of them out.
      const draining =
        candidates.some((c) => c.excluded === "draining") &&
        candidates.every((c) => c.excluded === "draining" || c.excluded === "offline");
      throw new DenvError(
        "conflict",
        draining ? HostMessages.allDraining(req.target) : ControlPlaneMessages.noOnlineHost(req.target),
      );
    }
    const newest = (await this.store.listVersions(req.project))[0];
    const local = newest && eligible.find((e) => e.host.id === newest.host_id);
    if (local)
      return { hostId: local.host.id, reason: `holds ${newest.id} (its layers are local)`, candidates };
    eligible.sort((a, b) => b.score - a.score || a.host.id.localeCompare(b.host.id));
    const best = eligible[0] as (typeof eligible)[number];
    return {
      hostId: best.host.id,
      reason:
        eligible.length === 1
          ? "the only online host of the target"
          : `most free capacity (${best.environments} environments)`,
      candidates,
    };
  }

  private async atVersion(version: VersionRecord): Promise<Placement> {
    const environments = (await this.store.listEnvironments({ hostId: version.host_id })).length;
    const candidates = [{ host: version.host_id, environments }];
    const host = await this.store.getHost(version.host_id);
    if (host?.drainingAt !== undefined) {
      throw new DenvError("conflict", HostMessages.versionOnDrainingHost(version.host_id, version.id));
    }
    if (!this.hub.isOnline(version.host_id)) {
      throw new DenvError(
        "conflict",
        `host ${version.host_id}, which holds ${version.id}, is offline: the version can only be restored there`,
      );
    }
    return { hostId: version.host_id, reason: `holds ${version.id} (snapshot locality)`, candidates };
  }
}
