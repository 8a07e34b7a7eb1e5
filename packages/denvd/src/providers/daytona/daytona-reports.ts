import type { HostEnvironment, Version } from "@denv/spec";
import { sandboxEnvironment, sandboxVersion } from "../sandbox-reports.js";
import { PROVIDER } from "./daytona-host.js";
import type { DaytonaEnvironmentRecord, DaytonaVersionRecord } from "./daytona-records.js";

/** How a Daytona version was captured, as its evidence says. */
export const METHOD = "daytona-snapshot";

/** An environment as the protocol reports it: one sandbox, isolated by Daytona's network setting. */
export function hostEnvironment(hostId: string, rec: DaytonaEnvironmentRecord): HostEnvironment {
  return sandboxEnvironment(hostId, rec, {
    provider: PROVIDER,
    policy: `daytona network (networkBlockAll: ${rec.networkBlockAll})`,
    internal: rec.networkBlockAll,
    stopped: rec.stopped,
    image: rec.image,
    imageId: rec.snapshot,
    timings: rec.timings,
  });
}

/** A version as the protocol reports it: a Daytona snapshot of one sandbox's filesystem. */
export function hostVersion(hostId: string, v: DaytonaVersionRecord): Version {
  return sandboxVersion(hostId, v, v.snapshot, METHOD);
}
