import { DenvError } from "@denv/spec";
import type { EgressCanary } from "../e2b/egress-probe.js";
import type { DaytonaRecords } from "./daytona-records.js";
import { type DaytonaClient, loadDaytona } from "./daytona-sdk.js";

export const PROVIDER = "Daytona";

/** What the Daytona runtime's parts share: who the host is, its client of Daytona, what it records. */
export interface DaytonaHost {
  readonly hostId: string;
  readonly client: DaytonaClient;
  readonly records: DaytonaRecords;
  /** Commands whose sandboxes are being made and not recorded yet: gc leaves them alone. */
  readonly inFlight: Set<string>;
  /** Listeners the egress probe connects to from inside each sandbox (protection 5). */
  readonly canaries: readonly EgressCanary[];
  log(line: string): void;
}

/** Daytona's errors as denv's: a missing sandbox or file, a refused key, or Daytona failing (502). */
export async function provider<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    if (err instanceof DenvError) throw err;
    const sdk = await loadDaytona();
    const message = err instanceof Error ? err.message : String(err);
    if (err instanceof sdk.DaytonaNotFoundError || err instanceof sdk.DaytonaFileNotFoundError)
      throw new DenvError("not_found", `${PROVIDER}: ${message}`);
    if (err instanceof sdk.DaytonaAuthenticationError)
      throw new DenvError("unauthorized", `${PROVIDER}: ${message}`);
    throw new DenvError("docker", `${PROVIDER}: ${message}`);
  }
}
