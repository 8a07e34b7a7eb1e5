import type { HostEnvironment, Version } from "@denv/spec";
import { sandboxEnvironment, sandboxVersion } from "../sandbox-reports.js";
import { PROVIDER } from "./prime-host.js";
import type { PrimeEnvironmentRecord, PrimeVersionRecord } from "./prime-records.js";
import { METHOD } from "./prime-versions.js";

/**
 * An environment as the protocol reports it: a sandbox per service, isolated by Prime's egress
 * policy, the services' sandboxes on a private network of their own.
 */
export function hostEnvironment(hostId: string, rec: PrimeEnvironmentRecord): HostEnvironment {
  const policy = `prime egress policy (allowlist: ${rec.networkAccess ? "none" : "[]"})`;
  return sandboxEnvironment(hostId, rec, {
    provider: PROVIDER,
    policy: rec.networkId ? `${policy}, private network ${rec.networkId}` : policy,
    internal: !rec.networkAccess,
    image: rec.image,
    imageId: rec.image,
    timings: rec.timings,
    ...(rec.peers ? { peers: rec.peers } : {}),
    ...(rec.networkId ? { network: { id: rec.networkId, name: policy } } : {}),
  });
}

/** A version as the protocol reports it: a Prime checkpoint of each sandbox's root filesystem. */
export function hostVersion(hostId: string, v: PrimeVersionRecord): Version {
  return sandboxVersion(hostId, v, v.checkpointId, METHOD, v.peerCheckpoints);
}
