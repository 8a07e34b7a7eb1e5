import type { HostEnvironment, Version } from "@denv/spec";
import { sandboxVersion } from "../sandbox-reports.js";
import { PROVIDER } from "./check-plan.js";
import type { E2bEnvironmentRecord, E2bVersionRecord } from "./e2b-records.js";

/** How an E2B version was captured, as its evidence says. */
export const METHOD = "e2b-snapshot";

/** An environment as the protocol reports it: one sandbox, isolated by E2B's network policy. */
export function hostEnvironment(hostId: string, rec: E2bEnvironmentRecord): HostEnvironment {
  const svc = rec.plan.agent.service;
  const policy = `e2b network policy (allowInternetAccess: ${rec.allowInternetAccess})`;
  return {
    id: rec.id,
    project: rec.project,
    name: rec.name,
    status: rec.paused ? "stopped" : "running",
    ...(rec.parentVersion ? { parent_version: rec.parentVersion } : {}),
    agent: rec.agent,
    services: [{ name: svc, container_id: rec.sandboxId, image: rec.image, image_id: rec.templateId }],
    // E2B gives a sandbox no network of denv's: the policy is what isolates it.
    network: { id: rec.sandboxId, name: policy, subnet: "", gateway: "" },
    evidence: {
      placement: { host: hostId, reason: `a bridge to ${PROVIDER}: one sandbox per environment` },
      network: { name: policy, subnet: "", internal: !rec.allowInternetAccess },
      volumes: { method: "none", from: rec.parentVersion ?? null },
      images: { [svc]: rec.templateId },
      // One call creates and starts a sandbox, and E2B runs the ready check: those spans are 0.
      timings: {
        create_ms: rec.timings.create_ms,
        start_ms: 0,
        health_ms: 0,
        probe_ms: rec.timings.probe_ms,
        total_ms: rec.timings.total_ms,
      },
      probe: rec.probe,
      egress: { mode: rec.plan.egress },
    },
  };
}

/** A version as the protocol reports it: an E2B snapshot of one sandbox. */
export function hostVersion(hostId: string, v: E2bVersionRecord): Version {
  return sandboxVersion(hostId, v, v.snapshotId, METHOD);
}
