import { DefaultCaps, Reservation } from "@denv/spec";
import type { EnvironmentRecord } from "../store/records.js";

/** What environments reserve on their host: placement and the host load count the same way. */

const DEFAULT_RESERVATION: Reservation = {
  memory_bytes: DefaultCaps.memoryBytes,
  cpus: DefaultCaps.cpus,
  pids: DefaultCaps.pids,
};

/**
 * What an environment reserves: the caps its host reported (evidence.caps), else the default
 * caps of each of its services (a host that does not report them yet, or an environment not
 * started yet: one service's).
 */
export function reservationOf(e: EnvironmentRecord | undefined): Reservation {
  const caps = Reservation.safeParse(e?.evidence?.caps);
  if (caps.success) return caps.data;
  const n = Math.max(1, e?.services.length ?? 0);
  return {
    memory_bytes: DEFAULT_RESERVATION.memory_bytes * n,
    cpus: DEFAULT_RESERVATION.cpus * n,
    pids: DEFAULT_RESERVATION.pids * n,
  };
}

/**
 * Statuses whose environments hold their caps on a host (a stopped one may start again; a
 * destroying one until its host said it is gone).
 */
export const HOLDING: ReadonlySet<string> = new Set(["pending", "running", "stopped", "destroying"]);
