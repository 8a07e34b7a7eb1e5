import type { Host } from "@denv/spec";
import type { HostRecord } from "../store/records.js";
import type { Store } from "../store/store.js";
import { presentHost } from "./present.js";

/**
 * The host rows, and the host list GET /v1/hosts pages through (every host presented with the
 * number of environments on it, by id), kept between requests. Reading 10,000 host rows and
 * counting 100,000 environments by host takes tens of milliseconds on the one event loop, and
 * placement needs the rows for every deployment.
 *
 * Correctness rests on one rule: `invalidate` runs after every store write that can change what
 * is kept. The store the control plane hands out (store/watched-store.ts) calls it after every
 * write of a host row ("hosts": join, hello, offline, drain, label and capacity updates, removal)
 * and of an environment row ("environments": created, moved, left on no host, destroyed, which
 * is what the counts count). A build that an invalidation overtakes still answers the requests
 * already waiting for it, which were concurrent with that write, and is dropped: no request that
 * starts after a write returned is answered from before it.
 *
 * Per process: one control plane owns its store (its hub holds the host sessions), so no other
 * process writes these rows behind its back.
 */
export class HostListCache {
  private rows: Promise<readonly HostRecord[]> | undefined;
  private presented: Promise<readonly Host[]> | undefined;
  /** How many times the host list was built (tests count them). */
  builds = 0;

  constructor(private readonly store: Store) {}

  /** Every host row, by id. */
  hostRows(): Promise<readonly HostRecord[]> {
    this.rows ??= keep(
      this.store.listHosts().then((hs) => hs.sort((a, b) => byId(a.id, b.id))),
      () => this.rows,
      () => {
        this.rows = undefined;
      },
    );
    return this.rows;
  }

  /** Every host as GET /v1/hosts presents it, by id. */
  list(): Promise<readonly Host[]> {
    this.presented ??= keep(
      this.build(),
      () => this.presented,
      () => {
        this.presented = undefined;
      },
    );
    return this.presented;
  }

  /** "hosts": a host row changed (both go); "environments": an environment row did (the counts go). */
  invalidate(what: "hosts" | "environments"): void {
    if (what === "hosts") this.rows = undefined;
    this.presented = undefined;
  }

  private async build(): Promise<readonly Host[]> {
    this.builds++;
    const [hosts, counts] = await Promise.all([this.hostRows(), this.store.countEnvironmentsByHost()]);
    return hosts.map((h) => presentHost(h, counts.get(h.id) ?? 0));
  }
}

/** Ids compare by code unit (they are ASCII), as the pages' `after` does. */
function byId(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/** `p`, forgotten (by `drop`) if it fails while it is still the one kept: the next call tries again. */
function keep<T>(p: Promise<T>, current: () => Promise<T> | undefined, drop: () => void): Promise<T> {
  p.catch(() => {
    if (current() === p) drop();
  });
  return p;
}
