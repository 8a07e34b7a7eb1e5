import type { HostEnvironment, Version } from "@denv/spec";
import { sandboxVersion } from "../sandbox-reports.js";
import { PROVIDER } from "./prime-host.js";
import type { PrimeEnvironmentRecord, PrimeVersionRecord } from "./prime-records.js";
import { METHOD } from "./prime-versions.js";

/** An environment as the protocol reports it: one sandbox, isolated by Prime's egress policy. */
export function hostEnvironment(hostId: string, rec: PrimeEnvironmentRecord): HostEnvironment {
  const svc = rec.plan.agent.service;
  const policy = `prime egress policy (allowlist: ${rec.networkAccess ? "none" : "[]"})`;
  return {
    id: rec.id,
    project: rec.project,
    name: rec.name,
    status: "running",
    ...(rec.parentVersion ? { parent_version: rec.parentVersion } : {}),
    agent: rec.agent,
    services: [{ name: svc, container_id: rec.sandboxId, image: rec.image, image_id: rec.image }],
    // Prime gives a sandbox no network of denv's: its egress policy is what isolates it.
    network: { id: rec.sandboxId, name: policy, subnet: "", gateway: "" },
    evidence: {
      placement: { host: hostId, reason: `a bridge to ${PROVIDER}: one sandbox per environment` },
      network: { name: policy, subnet: "", internal: !rec.networkAccess },
      volumes: { method: "none", from: rec.parentVersion ?? null },
      images: { [svc]: rec.image },
      timings: rec.timings,
      probe: rec.probe,
      egress: { mode: rec.plan.egress },
    },
  };
}

/** A version as the protocol reports it: a Prime checkpoint of one sandbox's root filesystem. */
export function hostVersion(hostId: string, v: PrimeVersionRecord): Version {
  return sandboxVersion(hostId, v, v.checkpointId, METHOD);
}
