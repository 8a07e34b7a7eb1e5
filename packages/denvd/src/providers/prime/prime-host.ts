import { DenvError } from "@denv/spec";
import type { EgressCanary } from "../e2b/egress-probe.js";
import { type PrimeApi, PrimeApiError } from "./prime-api.js";
import type { PrimeRecords } from "./prime-records.js";

export { PROVIDER } from "./prime-exec.js";

/** What the Prime runtime's parts share: who the host is, its client of Prime, what it records. */
export interface PrimeHost {
  readonly hostId: string;
  readonly api: PrimeApi;
  readonly records: PrimeRecords;
  /** Commands whose sandboxes are being made and not recorded yet: gc leaves them alone. */
  readonly inFlight: Set<string>;
  /** Listeners the egress probe connects to from inside each sandbox (protection 5). */
  readonly canaries: readonly EgressCanary[];
  /** Each sandbox's `timeout_minutes` (default MAX_TIMEOUT_MINUTES): Prime deletes it then. */
  readonly timeoutMinutes?: number;
  log(line: string): void;
}

/**
 * The longest life Prime gives a sandbox (POST /sandbox's `timeout_minutes`, 1 to 1440): its API
 * has no route that extends a running one, so denv asks for all of it.
 */
export const MAX_TIMEOUT_MINUTES = 1440;

/** Prime's errors as denv's: a missing sandbox, a refused key, or Prime failing (502). */
export async function provider<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    if (err instanceof DenvError || !(err instanceof PrimeApiError)) throw err;
    if (err.status === 404) throw new DenvError("not_found", err.message);
    if (err.status === 401 || err.status === 403) throw new DenvError("unauthorized", err.message);
    throw new DenvError("docker", err.message);
  }
}

/** How denv names what it makes at Prime (a sandbox, a network): `denv-<parts>`, lower case, at most 63 characters. */
export function primeName(...parts: string[]): string {
  return `denv-${parts.join("-")}`
    .toLowerCase()
    .replace(/[^a-z0-9-]/g, "-")
    .slice(0, 63);
}
