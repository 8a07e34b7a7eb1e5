import type { Plan, Version } from "@denv/spec";

/** What a provider runtime records of a version, as far as the protocol reports it. */
export interface SandboxVersion {
  id: string;
  project: string;
  number: number;
  sourceEnvironment: string;
  parentVersion?: string;
  plan: Plan;
  timings: { snapshot_ms: number; total_ms: number };
  createdAt: string;
}

/**
 * A version as the protocol reports it: the provider's snapshot (`snapshot`, its id or name) of
 * one sandbox, captured by `method`. Providers do not say how large a snapshot is.
 */
export function sandboxVersion(hostId: string, v: SandboxVersion, snapshot: string, method: string): Version {
  return {
    id: v.id,
    project: v.project,
    number: v.number,
    host_id: hostId,
    source_environment: v.sourceEnvironment,
    ...(v.parentVersion ? { parent_version: v.parentVersion } : {}),
    digests: { [v.plan.agent.service]: snapshot },
    volumes: {},
    method,
    sizes: { layer_bytes: 0, volume_bytes: 0 },
    timings: v.timings,
    created_at: v.createdAt,
  };
}
