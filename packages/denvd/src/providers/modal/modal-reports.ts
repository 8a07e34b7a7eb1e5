import type { HostEnvironment, Version } from "@denv/spec";
import { sandboxVersion } from "../sandbox-reports.js";
import { PROVIDER } from "./modal-host.js";
import type { ModalEnvironmentRecord, ModalVersionRecord } from "./modal-records.js";
import { METHOD } from "./modal-versions.js";

/** An environment as the protocol reports it: one sandbox, isolated by Modal's `blockNetwork`. */
export function hostEnvironment(hostId: string, rec: ModalEnvironmentRecord): HostEnvironment {
  const svc = rec.plan.agent.service;
  const policy = `modal blockNetwork: ${rec.networkAccess ? "false" : "true"}`;
  return {
    id: rec.id,
    project: rec.project,
    name: rec.name,
    status: "running",
    ...(rec.parentVersion ? { parent_version: rec.parentVersion } : {}),
    agent: rec.agent,
    services: [{ name: svc, container_id: rec.sandboxId, image: rec.imageId, image_id: rec.imageId }],
    // Modal gives a sandbox no network of denv's: blockNetwork is what isolates it.
    network: { id: rec.sandboxId, name: policy, subnet: "", gateway: "" },
    evidence: {
      placement: { host: hostId, reason: `a bridge to ${PROVIDER}: one sandbox per environment` },
      network: { name: policy, subnet: "", internal: !rec.networkAccess },
      volumes: { method: "none", from: rec.parentVersion ?? null },
      images: { [svc]: rec.imageId },
      timings: rec.timings,
      probe: rec.probe,
      egress: { mode: rec.plan.egress },
    },
  };
}

/** A version as the protocol reports it: Modal's filesystem snapshot of one sandbox (an image). */
export function hostVersion(hostId: string, v: ModalVersionRecord): Version {
  return sandboxVersion(hostId, v, v.imageId, METHOD);
}
