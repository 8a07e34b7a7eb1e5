import type { AgentPlan, EgressProbe, HostEnvironment, Plan, Version } from "@denv/spec";

/** What a provider runtime records of a version, as far as the protocol reports it. */
export interface SandboxVersion {
  id: string;
  project: string;
  number: number;
  sourceEnvironment: string;
  parentVersion?: string;
  plan: Plan;
  timings: { snapshot_ms: number; frozen_ms?: number; total_ms: number };
  createdAt: string;
}

/**
 * A version as the protocol reports it: the provider's snapshot (`snapshot`, its id or name) of
 * one sandbox, captured by `method`. Providers do not say how large a snapshot is.
 */
export function sandboxVersion(
  hostId: string,
  v: SandboxVersion,
  snapshot: string,
  method: string,
  peers: Record<string, string> = {},
): Version {
  return {
    id: v.id,
    project: v.project,
    number: v.number,
    host_id: hostId,
    source_environment: v.sourceEnvironment,
    ...(v.parentVersion ? { parent_version: v.parentVersion } : {}),
    digests: { [v.plan.agent.service]: snapshot, ...peers },
    volumes: {},
    method,
    sizes: { layer_bytes: 0, volume_bytes: 0 },
    timings: v.timings,
    created_at: v.createdAt,
  };
}

/** What a provider runtime records of an environment, as far as the protocol reports it. */
export interface SandboxEnvironment {
  id: string;
  project: string;
  name: string;
  sandboxId: string;
  parentVersion?: string;
  plan: Plan;
  agent: AgentPlan;
  probe: EgressProbe | { skipped: string };
}

/** How one provider's sandbox is reported: what isolates it, what it was made from, how long that took. */
export interface SandboxFacts {
  /** The provider's name, as the placement says it. */
  provider: string;
  /** The provider's network setting that isolates the sandbox, as the evidence names it. */
  policy: string;
  /** True when that setting shuts the sandbox's egress. */
  internal: boolean;
  stopped?: boolean;
  /** The image the service was asked from, and what the sandbox was made of (template, snapshot). */
  image: string;
  imageId: string;
  timings: HostEnvironment["evidence"]["timings"];
  /** The other services' sandboxes (a provider with a network between them), by service name. */
  peers?: Record<string, { sandboxId: string; image: string }>;
  /** The provider's network between the services' sandboxes, when there are several. */
  network?: { id: string; name: string };
}

/**
 * An environment as the protocol reports it: one sandbox of a hosted provider, no network of
 * denv's (the provider's setting is what isolates it), no volumes.
 */
export function sandboxEnvironment(
  hostId: string,
  rec: SandboxEnvironment,
  f: SandboxFacts,
): HostEnvironment {
  const svc = rec.plan.agent.service;
  const peers = Object.entries(f.peers ?? {});
  const services = [
    { name: svc, container_id: rec.sandboxId, image: f.image, image_id: f.imageId },
    ...peers.map(([name, p]) => ({ name, container_id: p.sandboxId, image: p.image, image_id: p.image })),
  ];
  const reason = f.network
    ? `a bridge to ${f.provider}: one sandbox per service, on a private network of the environment's`
    : `a bridge to ${f.provider}: one sandbox per environment`;
  return {
    id: rec.id,
    project: rec.project,
    name: rec.name,
    status: f.stopped ? "stopped" : "running",
    ...(rec.parentVersion ? { parent_version: rec.parentVersion } : {}),
    agent: rec.agent,
    services,
    network: { id: f.network?.id ?? rec.sandboxId, name: f.policy, subnet: "", gateway: "" },
    evidence: {
      placement: { host: hostId, reason },
      network: { name: f.policy, subnet: "", internal: f.internal },
      volumes: { method: "none", from: rec.parentVersion ?? null },
      images: Object.fromEntries(services.map((s) => [s.name, s.image_id])),
      timings: f.timings,
      probe: rec.probe,
      egress: { mode: rec.plan.egress },
    },
  };
}
