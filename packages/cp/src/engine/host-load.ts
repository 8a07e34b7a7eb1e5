import type { Reservation } from "@denv/spec";
import type { EnvironmentRecord } from "../store/records.js";
import type { Store } from "../store/store.js";
import type { EnvironmentChange } from "../store/watched-store.js";
import { HOLDING, reservationOf } from "./reservations.js";

/** One host's load: how many environments are on it, and what the holding ones reserve. */
export interface Load {
  environments: number;
  reserved: Reservation;
}

interface Entry {
  host: string | undefined;
  holding: boolean;
  reservation: Reservation;
}

/**
 * What each host holds, for placement, kept in memory: placing one environment among 10,000 hosts
 * must not read 100,000 environment rows. Built from the store on first use, then kept up to date
 * from every environment write (`apply`, called by the watched store once a write returned). A
 * write that failed, whose effect is unknown, makes the next use build it again. Writes that come
 * while it is being built are applied on top of what the build read.
 */
export class HostLoad {
  private envs: Map<string, Entry> | undefined;
  private readonly byHost = new Map<string, Load>();
  private building: Promise<void> | undefined;
  /** Writes seen while building, replayed over what the build read. */
  private pending: EnvironmentChange[] | undefined;
  /** How many times it was built from the store (tests count them). */
  builds = 0;

  constructor(private readonly store: Store) {}

  /** Every host's load (hosts with nothing on them are absent). */
  async loads(): Promise<ReadonlyMap<string, Load>> {
    while (!this.envs) {
      this.building ??= this.build().finally(() => {
        this.building = undefined;
      });
      await this.building;
    }
    return this.byHost;
  }

  apply(change: EnvironmentChange): void {
    if (this.pending) this.pending.push(change);
    if (!this.envs) return;
    if ("unknown" in change) {
      this.envs = undefined;
      this.byHost.clear();
      return;
    }
    const id = "put" in change ? change.put.id : change.deleted;
    this.remove(id);
    if ("put" in change) this.add(change.put);
  }

  private async build(): Promise<void> {
    this.builds++;
    this.pending = [];
    let rows: EnvironmentRecord[];
    try {
      rows = await this.store.listEnvironments();
    } catch (err) {
      this.pending = undefined;
      throw err;
    }
    const pending = this.pending;
    this.pending = undefined;
    this.envs = new Map();
    this.byHost.clear();
    for (const e of rows) this.add(e);
    for (const change of pending) this.apply(change);
  }

  private add(e: EnvironmentRecord): void {
    const entry: Entry = { host: e.hostId, holding: HOLDING.has(e.status), reservation: reservationOf(e) };
    this.envs?.set(e.id, entry);
    if (entry.host === undefined) return;
    const load = this.byHost.get(entry.host) ?? {
      environments: 0,
      reserved: { memory_bytes: 0, cpus: 0, pids: 0 },
    };
    load.environments++;
    if (entry.holding) load.reserved = sum(load.reserved, entry.reservation, 1);
    this.byHost.set(entry.host, load);
  }

  private remove(id: string): void {
    const entry = this.envs?.get(id);
    if (!entry) return;
    this.envs?.delete(id);
    const load = entry.host === undefined ? undefined : this.byHost.get(entry.host);
    if (!load || entry.host === undefined) return;
    load.environments--;
    if (entry.holding) load.reserved = sum(load.reserved, entry.reservation, -1);
    if (load.environments === 0) this.byHost.delete(entry.host);
  }
}

function sum(a: Reservation, b: Reservation, sign: 1 | -1): Reservation {
  return {
    memory_bytes: a.memory_bytes + sign * b.memory_bytes,
    cpus: a.cpus + sign * b.cpus,
    pids: a.pids + sign * b.pids,
  };
}
