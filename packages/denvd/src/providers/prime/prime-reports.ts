import type { HostEnvironment, Version } from "@denv/spec";
import { sandboxEnvironment, sandboxVersion } from "../sandbox-reports.js";
import { PROVIDER } from "./prime-host.js";
import type { PrimeEnvironmentRecord, PrimeVersionRecord } from "./prime-records.js";
import { METHOD } from "./prime-versions.js";

/** An environment as the protocol reports it: one sandbox, isolated by Prime's egress policy. */
export function hostEnvironment(hostId: string, rec: PrimeEnvironmentRecord): HostEnvironment {
  return sandboxEnvironment(hostId, rec, {
    provider: PROVIDER,
    policy: `prime egress policy (allowlist: ${rec.networkAccess ? "none" : "[]"})`,
    internal: !rec.networkAccess,
    image: rec.image,
    imageId: rec.image,
    timings: rec.timings,
  });
}

/** A version as the protocol reports it: a Prime checkpoint of one sandbox's root filesystem. */
export function hostVersion(hostId: string, v: PrimeVersionRecord): Version {
  return sandboxVersion(hostId, v, v.checkpointId, METHOD);
}
