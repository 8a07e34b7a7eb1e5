import type { EnvironmentRecord } from "./records.js";
import type { Store } from "./store.js";

/** The Store methods that write host rows. */
export const HOST_WRITES = [
  "createHost",
  "updateHost",
  "drainHost",
  "deleteHost",
] as const satisfies ReadonlyArray<keyof Store>;

/** The Store methods that write environment rows (and so what each host holds). */
export const ENVIRONMENT_WRITES = ["putEnvironment", "deleteEnvironment"] as const satisfies ReadonlyArray<
  keyof Store
>;

/** An environment write as a watcher learns of it; `unknown`: it failed, and may have changed the row or not. */
export type EnvironmentChange = { put: EnvironmentRecord } | { deleted: string } | { unknown: string };

/** Told after each write (also a failed one) of a host or an environment row. */
export interface StoreWatcher {
  hostsChanged(): void;
  environmentChanged(change: EnvironmentChange): void;
}

/**
 * `store` with `watcher` told after every write of HOST_WRITES and ENVIRONMENT_WRITES, once the
 * write returned or failed. The composition root hands this store to every service, the engine
 * and the hub's lifecycle, so no write of those rows bypasses the watcher: what the control plane
 * keeps in memory about hosts (the host list, what each host holds) is never older than the last
 * write that returned.
 */
export function watchedStore(store: Store, watcher: StoreWatcher): Store {
  const hostWrites = new Set<PropertyKey>(HOST_WRITES);
  return new Proxy(store, {
    get(target, key) {
      const value: unknown = Reflect.get(target, key, target);
      if (typeof value !== "function") return value;
      const method = (value as (...args: unknown[]) => Promise<unknown>).bind(target);
      if (hostWrites.has(key)) {
        return async (...args: unknown[]) => {
          try {
            return await method(...args);
          } finally {
            watcher.hostsChanged();
          }
        };
      }
      if (key === "putEnvironment" || key === "deleteEnvironment") {
        return async (...args: unknown[]) => {
          const arg = args[0] as EnvironmentRecord | string;
          const id = typeof arg === "string" ? arg : arg.id;
          let change: EnvironmentChange = { unknown: id };
          try {
            const r = await method(...args);
            change = typeof arg === "string" ? { deleted: arg } : { put: arg };
            return r;
          } finally {
            watcher.environmentChanged(change);
          }
        };
      }
      return method;
    },
  });
}
