import type { HostEnvironment, Version } from "@denv/spec";
import { sandboxVersion } from "../sandbox-reports.js";
import { PROVIDER } from "./daytona-host.js";
import type { DaytonaEnvironmentRecord, DaytonaVersionRecord } from "./daytona-records.js";

/** How a Daytona version was captured, as its evidence says. */
export const METHOD = "daytona-snapshot";

/** An environment as the protocol reports it: one sandbox, isolated by Daytona's network setting. */
export function hostEnvironment(hostId: string, rec: DaytonaEnvironmentRecord): HostEnvironment {
  const svc = rec.plan.agent.service;
  const policy = `daytona network (networkBlockAll: ${rec.networkBlockAll})`;
  return {
    id: rec.id,
    project: rec.project,
    name: rec.name,
    status: rec.stopped ? "stopped" : "running",
    ...(rec.parentVersion ? { parent_version: rec.parentVersion } : {}),
    agent: rec.agent,
    services: [{ name: svc, container_id: rec.sandboxId, image: rec.image, image_id: rec.snapshot }],
    // Daytona gives a sandbox no network of denv's: its setting is what isolates it.
    network: { id: rec.sandboxId, name: policy, subnet: "", gateway: "" },
    evidence: {
      placement: { host: hostId, reason: `a bridge to ${PROVIDER}: one sandbox per environment` },
      network: { name: policy, subnet: "", internal: rec.networkBlockAll },
      volumes: { method: "none", from: rec.parentVersion ?? null },
      images: { [svc]: rec.snapshot },
      timings: rec.timings,
      probe: rec.probe,
      egress: { mode: rec.plan.egress },
    },
  };
}

/** A version as the protocol reports it: a Daytona snapshot of one sandbox's filesystem. */
export function hostVersion(hostId: string, v: DaytonaVersionRecord): Version {
  return sandboxVersion(hostId, v, v.snapshot, METHOD);
}
