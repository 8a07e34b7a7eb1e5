import type { EgressProbe, EnvironmentEvidence, HostEnvironment, Version } from "@denv/spec";
import type { ProbeResult } from "../probe.js";
import type { EnvironmentRecord, VersionRecord } from "../records.js";

/**
 * What the runtime tells its callers, from what the host records: an environment as the host
 * reports it (spec's HostEnvironment, the result of env.deploy and its kin), a version as the
 * runtime sees it (VersionInfo, with its images) and as the host reports it (spec's Version).
 * The records keep what only the host needs (baselines, store ids, the tests archive).
 */

export interface VersionInfo {
  id: string;
  project: string;
  number: number;
  sourceEnvironment: string;
  parentVersion?: string;
  method: VersionRecord["method"];
  timings: VersionRecord["timings"];
  sizes: VersionRecord["sizes"];
  images: VersionRecord["images"];
  volumes: VersionRecord["volumes"];
  createdAt: string;
}

export function hostEnvironment(rec: EnvironmentRecord): HostEnvironment {
  return {
    id: rec.id,
    project: rec.project,
    name: rec.name,
    status: rec.status,
    ...(rec.parentVersion ? { parent_version: rec.parentVersion } : {}),
    agent: rec.plan.agent,
    services: rec.plan.services.map((s) => ({
      name: s.name,
      container_id: rec.containers[s.name] ?? "",
      image: rec.images[s.name]?.image ?? s.image,
      image_id: rec.images[s.name]?.imageId ?? "",
    })),
    network: rec.network,
    evidence: environmentEvidence(rec.evidence),
  };
}

export function versionInfo(v: VersionRecord): VersionInfo {
  return {
    id: v.id,
    project: v.project,
    number: v.number,
    sourceEnvironment: v.sourceEnvironment,
    parentVersion: v.parentVersion,
    method: v.method,
    timings: v.timings,
    sizes: v.sizes,
    images: v.images,
    volumes: v.volumes,
    createdAt: v.createdAt,
  };
}

const snake = (key: string) => key.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);

export function hostVersion(info: VersionInfo, hostId: string): Version {
  return {
    id: info.id,
    project: info.project,
    number: info.number,
    host_id: hostId,
    source_environment: info.sourceEnvironment,
    ...(info.parentVersion ? { parent_version: info.parentVersion } : {}),
    digests: Object.fromEntries(Object.entries(info.images).map(([svc, img]) => [svc, img.imageId])),
    volumes: info.volumes,
    method: info.method,
    sizes: { layer_bytes: info.sizes.layerBytes, volume_bytes: info.sizes.volumeBytes },
    timings: Object.fromEntries(Object.entries(info.timings).map(([k, v]) => [snake(k), v])),
    created_at: info.createdAt,
  };
}

export function egressProbe(p: ProbeResult): EgressProbe {
  return {
    ok: p.ok,
    findings: p.findings,
    network: { name: p.network.name, internal: p.network.internal, reject_rule: p.network.rejectRule },
    services: p.services.map((s) => ({
      service: s.service,
      routes: s.routes,
      default_route: s.defaultRoute,
      route_out: s.routeOut,
      canary_reached: s.canaryReached,
      canary_from: s.canaryFrom,
      nameservers: s.nameservers,
      networks: s.networks,
    })),
    duration_ms: p.durationMs,
  };
}

function snakeKeys(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(snakeKeys);
  if (v === null || typeof v !== "object") return v;
  return Object.fromEntries(Object.entries(v).map(([k, x]) => [snake(k), snakeKeys(x)]));
}

/**
 * The evidence of a record. Records written before evidence was snake_case (their `timings` and
 * `probe`) read as if they had been; nothing else of theirs changed. The agent checks it with
 * spec's schema before it leaves the host.
 */
function environmentEvidence(stored: Record<string, unknown>): EnvironmentEvidence {
  const { timings, probe } = stored;
  return {
    ...stored,
    ...(timings !== undefined ? { timings: snakeKeys(timings) } : {}),
    ...(probe !== undefined ? { probe: snakeKeys(probe) } : {}),
  } as EnvironmentEvidence;
}
