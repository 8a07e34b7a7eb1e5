import { Deployment, Environment, Host, Project, Target } from "@denv/spec";
import type {
  DeploymentRecord,
  EnvironmentRecord,
  HostRecord,
  ProjectRecord,
  TargetRecord,
} from "../store/records.js";

/** Records -> API resources, validated with spec's schemas on the way out. */

export function presentProject(p: ProjectRecord): Project {
  return Project.parse({
    name: p.name,
    kind: p.kind,
    ...(p.repo ? { repo: p.repo } : {}),
    compose_path: p.composePath,
    created_at: p.createdAt,
  });
}

export function presentEnvironment(e: EnvironmentRecord): Environment {
  return Environment.parse({
    id: e.id,
    project: e.project,
    name: e.name,
    status: e.status,
    ...(e.hostId ? { host_id: e.hostId } : {}),
    ...(e.version ? { version: e.version } : {}),
    ...(e.parentVersion ? { parent_version: e.parentVersion } : {}),
    sandbox: e.sandbox,
    ...(e.expiresAt ? { expires_at: e.expiresAt } : {}),
    services: e.services,
    ...(e.agent ? { agent: e.agent } : {}),
    ...(e.evidence ? { evidence: e.evidence } : {}),
    created_at: e.createdAt,
  });
}

export function presentDeployment(d: DeploymentRecord): Deployment {
  return Deployment.parse({
    id: d.id,
    kind: d.kind,
    project: d.project,
    environment: d.environment,
    status: d.status,
    phases: d.phases,
    ...(d.result !== undefined ? { result: d.result } : {}),
    ...(d.error ? { error: d.error } : {}),
    ...(d.hostId ? { host_id: d.hostId } : {}),
    created_at: d.createdAt,
    ...(d.finishedAt ? { finished_at: d.finishedAt } : {}),
  });
}

export function presentHost(h: HostRecord, environments: number): Host {
  return Host.parse({
    id: h.id,
    target: h.target,
    status: h.status,
    ...(h.version ? { version: h.version } : {}),
    labels: h.labels,
    ...(h.capacity ? { capacity: h.capacity } : {}),
    environments,
    draining: h.drainingAt !== undefined,
    ...(h.lastSeenAt ? { last_seen_at: h.lastSeenAt } : {}),
    created_at: h.createdAt,
  });
}

/**
 * The `hosts` driver (denvd pools) can do everything. It is the only kind that exists today:
 * other kinds are refused at creation, so no capability table is claimed for them.
 */
const HOSTS_CAPABILITIES = {
  multi_service: true,
  snapshot: true,
  fork: true,
  pause: true,
  egress_control: true,
  exec_streaming: true,
  files: true,
};

export function presentTarget(t: TargetRecord): Target {
  return Target.parse({
    name: t.name,
    kind: t.kind,
    capabilities: HOSTS_CAPABILITIES,
    created_at: t.createdAt,
  });
}
