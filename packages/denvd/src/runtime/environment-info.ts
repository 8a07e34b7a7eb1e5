import type { Plan } from "@denv/spec";
import type { EnvironmentRecord, VersionRecord } from "../records.js";

/**
 * What the runtime tells its callers about an environment and a version: the records without
 * what only the host needs (baselines, store ids, the tests archive).
 */

export interface EnvironmentInfo {
  id: string;
  project: string;
  name: string;
  status: EnvironmentRecord["status"];
  parentVersion?: string;
  agent: Plan["agent"];
  services: Array<{ name: string; containerId: string; image: string; imageId: string }>;
  network: EnvironmentRecord["network"];
  evidence: Record<string, unknown>;
}

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

export function environmentInfo(rec: EnvironmentRecord): EnvironmentInfo {
  return {
    id: rec.id,
    project: rec.project,
    name: rec.name,
    status: rec.status,
    parentVersion: rec.parentVersion,
    agent: rec.plan.agent,
    services: rec.plan.services.map((s) => ({
      name: s.name,
      containerId: rec.containers[s.name] ?? "",
      image: rec.images[s.name]?.image ?? s.image,
      imageId: rec.images[s.name]?.imageId ?? "",
    })),
    network: rec.network,
    evidence: rec.evidence,
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
