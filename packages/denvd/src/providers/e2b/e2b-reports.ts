import type { HostEnvironment, Version } from "@denv/spec";
import { sandboxEnvironment, sandboxVersion } from "../sandbox-reports.js";
import { PROVIDER } from "./check-plan.js";
import type { E2bEnvironmentRecord, E2bVersionRecord } from "./e2b-records.js";

/** How an E2B version was captured, as its evidence says. */
export const METHOD = "e2b-snapshot";

/** An environment as the protocol reports it: one sandbox, isolated by E2B's network policy. */
export function hostEnvironment(hostId: string, rec: E2bEnvironmentRecord): HostEnvironment {
  return sandboxEnvironment(hostId, rec, {
    provider: PROVIDER,
    policy: `e2b network policy (allowInternetAccess: ${rec.allowInternetAccess})`,
    internal: !rec.allowInternetAccess,
    stopped: rec.paused,
    image: rec.image,
    imageId: rec.templateId,
    // One call creates and starts a sandbox, and E2B runs the ready check: those spans are 0.
    timings: {
      create_ms: rec.timings.create_ms,
      start_ms: 0,
      health_ms: 0,
      probe_ms: rec.timings.probe_ms,
      total_ms: rec.timings.total_ms,
    },
  });
}

/** A version as the protocol reports it: an E2B snapshot of one sandbox. */
export function hostVersion(hostId: string, v: E2bVersionRecord): Version {
  return sandboxVersion(hostId, v, v.snapshotId, METHOD);
}
