import {
  Deployment,
  Environment,
  Host,
  Project,
  TARGET_KINDS,
  TARGET_SETTINGS,
  Target,
  Version,
} from "@denv/spec";
import type {
  DeploymentRecord,
  EnvironmentRecord,
  HostRecord,
  ProjectRecord,
  TargetRecord,
  VersionRecord,
} from "../store/records.js";

/** Records -> API resources, validated with spec's schemas on the way out. */

export function presentProject(p: ProjectRecord): Project {
  return Project.parse({
    name: p.name,
    kind: p.kind,
    repo: p.repo || undefined,
    compose_path: p.composePath,
    created_at: p.createdAt,
  });
}

/**
 * `online` says whether a host's stream is connected now (the hub's isOnline): an environment is
 * reachable while its host is, whatever status the host last reported.
 */
export function presentEnvironment(e: EnvironmentRecord, online: (hostId: string) => boolean): Environment {
  return Environment.parse({
    id: e.id,
    project: e.project,
    name: e.name,
    status: e.status,
    host_id: e.hostId || undefined,
    version: e.version || undefined,
    parent_version: e.parentVersion || undefined,
    sandbox: e.sandbox,
    expires_at: e.expiresAt || undefined,
    services: e.services,
    agent: e.agent || undefined,
    evidence: e.evidence || undefined,
    reachable: e.hostId && e.status !== "destroying" ? online(e.hostId) : false,
    ...(e.sandbox
      ? { pool: (e.evidence?.pool as { claim?: string } | undefined)?.claim === "hit" ? "hit" : "miss" }
      : {}),
    created_at: e.createdAt,
  });
}

/** `replicas`: the hosts holding it, origin first (Store.listReplicas). */
export function presentVersion(v: VersionRecord, replicas: readonly string[]): Version {
  return Version.parse({ ...v, replicas });
}

export function presentDeployment(d: DeploymentRecord): Deployment {
  return Deployment.parse({
    id: d.id,
    kind: d.kind,
    project: d.project,
    environment: d.environment,
    status: d.status,
    phases: d.phases,
    result: d.result,
    error: d.error || undefined,
    host_id: d.hostId || undefined,
    created_at: d.createdAt,
    finished_at: d.finishedAt || undefined,
  });
}

export function presentHost(h: HostRecord, environments: number): Host {
  return Host.parse({
    id: h.id,
    target: h.target,
    status: h.status,
    version: h.version || undefined,
    labels: h.labels,
    capacity: h.capacity || undefined,
    environments,
    draining: h.drainingAt !== undefined,
    last_seen_at: h.lastSeenAt || undefined,
    created_at: h.createdAt,
  });
}

/**
 * A target as the API shows it: its kind's row of the capability table (packages/spec/src/targets.ts),
 * its settings, and the names of its credentials (never their values, which stay sealed).
 */
export function presentTarget(t: TargetRecord): Target {
  return Target.parse({
    name: t.name,
    kind: t.kind,
    capabilities: TARGET_KINDS[t.kind].capabilities,
    settings: t.settings ?? {},
    credentials: t.credentials ? TARGET_SETTINGS[t.kind].credentials.map((c) => c.name) : [],
    created_at: t.createdAt,
  });
}
