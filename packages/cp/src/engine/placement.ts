import {
  DenvError,
  type EnvironmentNeeds,
  PlacementEvidence,
  PlacementMessages,
  type Reservation,
  TARGET_KINDS,
} from "@denv/spec";
import type { HostHub } from "../hub/hub.js";
import type { HostRecord, VersionRecord } from "../store/records.js";
import type { Store } from "../store/store.js";
import type { TargetDrivers } from "../targets/driver.js";
import { type CandidateHost, type Choice, choose, type Overcommit, type Placement } from "./choose.js";
import type { HostLoad } from "./host-load.js";
import { reservationOf } from "./reservations.js";

// placement.test.ts and bench/hosts import the decision from here, where it used to live.
export {
  type CandidateHost,
  type Choice,
  choose,
  describeNeed,
  type Overcommit,
} from "./choose.js";
export { HOLDING, reservationOf } from "./reservations.js";

/**
 * Placement: which host a new environment goes to, and why (docs/reference/targets.md#placement).
 * `choose` (choose.ts) is the decision, pure; `Placer` gathers what it decides on from the store
 * and the hub, and keeps two placements from counting the same room.
 */

export type PlacementRequest =
  /** A new build: any fitting host of the target. */
  | {
      target: string;
      project: string;
      /** PROJECT/ENV being deployed (what it reserved last time is what it asks for now). */
      environment: string;
      /** Placement labels the host must carry. */
      labels?: Record<string, string>;
      /** The deployment placing: counted as in flight on the chosen host until it ends. */
      deployment: string;
      /** What the file asks of the target (its services), read from the upload. */
      needs?: EnvironmentNeeds;
    }
  /** Fork, rollback and sandbox: restored on a host holding the version, or sent to one first. */
  | { version: VersionRecord; deployment: string };

const add = (a: Reservation, b: Reservation): Reservation => ({
  memory_bytes: a.memory_bytes + b.memory_bytes,
  cpus: a.cpus + b.cpus,
  pids: a.pids + b.pids,
});

/**
 * Places deployments one at a time (so two never count the same room), against what the store
 * says is on each host plus the placements of deployments still running, then `choose`s.
 */
export class Placer {
  /** Placements made by deployments that may not have saved their `place` phase yet. */
  private readonly inFlight = new Map<string, { host: string; need: Reservation }>();
  private queue: Promise<unknown> = Promise.resolve();

  constructor(
    private readonly store: Store,
    private readonly hub: Pick<HostHub, "isOnline">,
    /** The host rows and what each host holds, kept in memory (over the same store's writes). */
    private readonly fleet: {
      hosts: { hostRows(): Promise<readonly HostRecord[]> };
      load: Pick<HostLoad, "loads">;
    },
    private readonly options: {
      overcommit: Overcommit;
      /** The throughput a transfer between hosts is assumed to get, in MB (10^6 bytes) per second. */
      transferMbps: number;
    },
    /** Each target kind's driver: its capabilities, and how a provisioned target grows. */
    private readonly drivers?: TargetDrivers,
  ) {}

  place(req: PlacementRequest): Promise<Placement> {
    const next = this.queue.then(() => this.placeNow(req));
    this.queue = next.catch(() => undefined);
    return next;
  }

  private async placeNow(req: PlacementRequest): Promise<Placement> {
    const project = "version" in req ? req.version.project : req.project;
    const projectEnvs = await this.store.listEnvironments({ project });
    let target: string;
    let need: Reservation;
    let labels: Record<string, string> = {};
    let choice: Pick<Choice, "version" | "newest"> = {};
    let holders: string[] = [];
    if ("version" in req) {
      const v = req.version;
      holders = await this.store.listReplicas(v.id);
      // A version stays in its origin's target: it is only ever sent to hosts of that target.
      const holder = (await Promise.all(holders.map((id) => this.store.getHost(id)))).find((h) => h);
      if (!holder) throw new DenvError("conflict", PlacementMessages.versionNotHeld(v.id));
      target = holder.target;
      need = reservationOf(
        projectEnvs.find((e) => e.version === v.id && e.evidence?.caps) ??
          projectEnvs.find((e) => e.evidence?.caps) ??
          projectEnvs.find((e) => e.version === v.id),
      );
      choice = {
        version: { id: v.id, origin: v.host_id, bytes: v.sizes.layer_bytes + v.sizes.volume_bytes },
      };
    } else {
      target = req.target;
      labels = req.labels ?? {};
      need = reservationOf(
        projectEnvs.find((e) => e.id === req.environment && e.evidence?.caps) ??
          projectEnvs.find((e) => e.evidence?.caps),
      );
      const newest = (await this.store.listVersions(req.project))[0];
      if (newest) {
        choice = { newest: newest.id };
        holders = await this.store.listReplicas(newest.id);
      }
    }
    const local = new Set(holders);
    const loads = await this.fleet.load.loads();
    const inFlight = await this.inFlightByHost(req.deployment);
    const hosts: CandidateHost[] = [];
    for (const host of await this.fleet.hosts.hostRows()) {
      if (host.target !== target) continue;
      const load = loads.get(host.id);
      const extra = inFlight.get(host.id);
      const reserved = load?.reserved ?? { memory_bytes: 0, cpus: 0, pids: 0 };
      hosts.push({
        host,
        online: this.hub.isOnline(host.id),
        environments: load?.environments ?? 0,
        reserved: extra ? add(reserved, extra) : reserved,
        local: local.has(host.id),
      });
    }
    const targetRecord = await this.store.getTarget(target);
    if (targetRecord && this.drivers) {
      const kind = (await this.store.getProject(project))?.kind ?? "rl-environment";
      const services = Math.max(1, ...projectEnvs.map((e) => e.services.length));
      this.drivers.checkCapabilities(targetRecord, ("needs" in req && req.needs) || { services, kind });
    }
    let placed: Placement;
    try {
      placed = choose({
        target,
        hosts,
        need,
        labels,
        overcommit: this.options.overcommit,
        transferBytesPerSecond: this.options.transferMbps * 1e6,
        ...choice,
      });
    } catch (err) {
      // A provisioned target grows: its driver creates a machine for the next try, and says so.
      const driver =
        targetRecord && this.drivers?.has(targetRecord.kind)
          ? this.drivers.for(targetRecord.kind)
          : undefined;
      if (!(err instanceof DenvError) || !targetRecord || !driver?.provide || "version" in req) throw err;
      throw new DenvError("conflict", await driver.provide(targetRecord));
    }
    if (targetRecord) {
      placed.evidence = {
        ...placed.evidence,
        target: {
          name: target,
          kind: targetRecord.kind,
          enforced_by: TARGET_KINDS[targetRecord.kind].enforcedBy,
        },
      };
    }
    this.inFlight.set(req.deployment, { host: placed.hostId, need });
    return placed;
  }

  /**
   * Per host: what running deployments placed there but did not record on it yet reserve (the
   * environments on it are the HostLoad's).
   */
  private async inFlightByHost(self: string): Promise<Map<string, Reservation>> {
    const out = new Map<string, Reservation>();
    const put = (host: string, r: Reservation) =>
      out.set(host, add(out.get(host) ?? { memory_bytes: 0, cpus: 0, pids: 0 }, r));
    const running = await this.store.listDeployments({ statuses: ["running"] });
    const live = new Set(running.map((d) => d.id));
    for (const id of this.inFlight.keys()) if (!live.has(id)) this.inFlight.delete(id);
    for (const d of running) {
      if (d.id === self) continue;
      const saved = PlacementEvidence.safeParse(d.phases.find((p) => p.name === "place")?.evidence);
      const p =
        this.inFlight.get(d.id) ?? (saved.success ? { host: saved.data.host, need: saved.data.need } : null);
      if (!p) continue;
      // A fork about to finish whose environment already stands there is counted as an environment
      // (a deploy's previous host environment runs until the switch, so both count until then).
      if (d.kind === "fork" && (await this.store.getEnvironment(d.environment))?.hostId === p.host) continue;
      put(p.host, p.need);
    }
    return out;
  }
}
