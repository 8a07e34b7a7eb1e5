import type { Selectable } from "kysely";
import type {
  DeploymentRecord,
  EnvironmentRecord,
  HostRecord,
  JoinTokenRecord,
  MachineRecord,
  PoolRecord,
  ProjectRecord,
  TargetRecord,
  TokenRecord,
  VersionRecord,
} from "./records.js";
import type { Database } from "./schema.js";

/** Row <-> record mapping: the one place that knows about JSON-in-text and 0/1 booleans. */

type Row<T extends keyof Database> = Selectable<Database[T]>;

function json<T>(text: string): T {
  return JSON.parse(text) as T;
}

function jsonOrUndefined<T>(text: string | null): T | undefined {
  return text === null ? undefined : (JSON.parse(text) as T);
}

/** `null` columns become absent fields (the API omits them rather than sending null). */
function opt<K extends string, V>(key: K, value: V | null): { [P in K]?: V } {
  return (value === null ? {} : { [key]: value }) as { [P in K]?: V };
}

export function tokenFromRow(r: Row<"tokens">): TokenRecord {
  return {
    id: r.id,
    name: r.name,
    role: r.role as TokenRecord["role"],
    ...opt("project", r.project),
    hash: r.hash,
    createdAt: r.created_at,
  };
}

export function tokenToRow(t: TokenRecord): Row<"tokens"> {
  return {
    id: t.id,
    name: t.name,
    role: t.role,
    project: t.project ?? null,
    hash: t.hash,
    created_at: t.createdAt,
  };
}

export function projectFromRow(r: Row<"projects">): ProjectRecord {
  return {
    name: r.name,
    kind: r.kind as ProjectRecord["kind"],
    ...opt("repo", r.repo),
    composePath: r.compose_path,
    createdAt: r.created_at,
  };
}

export function poolFromRow(r: Row<"pools">): PoolRecord {
  return {
    project: r.project,
    ...(r.size_file !== null ? { sizeFile: Number(r.size_file) } : {}),
    ...(r.size_set !== null ? { sizeSet: Number(r.size_set) } : {}),
    updatedAt: r.updated_at,
  };
}

export function environmentFromRow(r: Row<"environments">): EnvironmentRecord {
  return {
    id: r.id,
    project: r.project,
    name: r.name,
    ...opt("hostId", r.host_id),
    ...opt("hostEnv", r.host_env),
    status: r.status as EnvironmentRecord["status"],
    ...opt("version", r.version),
    ...opt("parentVersion", r.parent_version),
    sandbox: Number(r.sandbox) === 1,
    ...(Number(r.pool) === 1 ? { pool: true } : {}),
    ...opt("expiresAt", r.expires_at),
    services: json(r.services),
    ...opt("agent", jsonOrUndefined<EnvironmentRecord["agent"]>(r.agent) ?? null),
    ...opt("evidence", jsonOrUndefined<Record<string, unknown>>(r.evidence) ?? null),
    createdAt: r.created_at,
    updatedAt: r.updated_at,
  };
}

export function environmentToRow(e: EnvironmentRecord): Row<"environments"> {
  return {
    id: e.id,
    project: e.project,
    name: e.name,
    host_id: e.hostId ?? null,
    host_env: e.hostEnv ?? null,
    status: e.status,
    version: e.version ?? null,
    parent_version: e.parentVersion ?? null,
    sandbox: e.sandbox ? 1 : 0,
    pool: e.pool ? 1 : 0,
    expires_at: e.expiresAt ?? null,
    services: JSON.stringify(e.services),
    agent: e.agent ? JSON.stringify(e.agent) : null,
    evidence: e.evidence ? JSON.stringify(e.evidence) : null,
    created_at: e.createdAt,
    updated_at: e.updatedAt,
  };
}

export function deploymentFromRow(r: Row<"deployments">): DeploymentRecord {
  return {
    id: r.id,
    kind: r.kind as DeploymentRecord["kind"],
    project: r.project,
    environment: r.environment,
    status: r.status as DeploymentRecord["status"],
    phases: json(r.phases),
    ...opt("result", jsonOrUndefined<unknown>(r.result) ?? null),
    ...opt("error", jsonOrUndefined<DeploymentRecord["error"]>(r.error) ?? null),
    ...opt("hostId", r.host_id),
    state: json(r.state),
    createdAt: r.created_at,
    ...opt("finishedAt", r.finished_at),
  };
}

export function deploymentToRow(d: DeploymentRecord): Row<"deployments"> {
  return {
    id: d.id,
    kind: d.kind,
    project: d.project,
    environment: d.environment,
    status: d.status,
    phases: JSON.stringify(d.phases),
    result: d.result === undefined ? null : JSON.stringify(d.result),
    error: d.error ? JSON.stringify(d.error) : null,
    host_id: d.hostId ?? null,
    state: JSON.stringify(d.state),
    created_at: d.createdAt,
    finished_at: d.finishedAt ?? null,
  };
}

export function versionFromRow(r: Row<"versions">): VersionRecord {
  return {
    id: r.id,
    project: r.project,
    number: Number(r.number),
    host_id: r.host_id,
    source_environment: r.source_environment,
    ...opt("parent_version", r.parent_version),
    digests: json(r.digests),
    volumes: json(r.volumes),
    method: r.method,
    sizes: json(r.sizes),
    timings: json(r.timings),
    created_at: r.created_at,
  };
}

export function versionToRow(v: VersionRecord): Row<"versions"> {
  return {
    id: v.id,
    project: v.project,
    number: v.number,
    host_id: v.host_id,
    source_environment: v.source_environment,
    parent_version: v.parent_version ?? null,
    digests: JSON.stringify(v.digests),
    volumes: JSON.stringify(v.volumes),
    method: v.method,
    sizes: JSON.stringify(v.sizes),
    timings: JSON.stringify(v.timings),
    created_at: v.created_at,
  };
}

export function targetFromRow(r: Row<"targets">): TargetRecord {
  return {
    name: r.name,
    kind: r.kind as TargetRecord["kind"],
    createdAt: r.created_at,
    ...(r.settings ? { settings: json<Record<string, unknown>>(r.settings) } : {}),
    ...opt("credentials", r.credentials),
  };
}

export function targetRow(t: TargetRecord): Row<"targets"> {
  return {
    name: t.name,
    kind: t.kind,
    created_at: t.createdAt,
    settings: t.settings ? JSON.stringify(t.settings) : null,
    credentials: t.credentials ?? null,
  };
}

export function machineFromRow(r: Row<"machines">): MachineRecord {
  return {
    id: r.id,
    target: r.target,
    ...opt("providerId", r.provider_id),
    status: r.status as MachineRecord["status"],
    costClass: r.cost_class,
    ...opt("hostId", r.host_id),
    ...opt("joinTokenId", r.join_token_id),
    ...opt("error", r.error),
    ...opt("idleSince", r.idle_since),
    createdAt: r.created_at,
    updatedAt: r.updated_at,
  };
}

export function machineRow(m: MachineRecord): Row<"machines"> {
  return {
    id: m.id,
    target: m.target,
    provider_id: m.providerId ?? null,
    status: m.status,
    cost_class: m.costClass,
    host_id: m.hostId ?? null,
    join_token_id: m.joinTokenId ?? null,
    error: m.error ?? null,
    idle_since: m.idleSince ?? null,
    created_at: m.createdAt,
    updated_at: m.updatedAt,
  };
}

export function hostFromRow(r: Row<"hosts">): HostRecord {
  return {
    id: r.id,
    target: r.target,
    credentialHash: r.credential_hash,
    status: r.status as HostRecord["status"],
    ...opt("version", r.version),
    labels: json(r.labels),
    ...opt("capacity", jsonOrUndefined<HostRecord["capacity"]>(r.capacity) ?? null),
    ...opt("lastSeenAt", r.last_seen_at),
    ...opt("drainingAt", r.draining_at),
    createdAt: r.created_at,
  };
}

export function hostToRow(h: HostRecord): Row<"hosts"> {
  return {
    id: h.id,
    target: h.target,
    credential_hash: h.credentialHash,
    status: h.status,
    version: h.version ?? null,
    labels: JSON.stringify(h.labels),
    capacity: h.capacity ? JSON.stringify(h.capacity) : null,
    last_seen_at: h.lastSeenAt ?? null,
    created_at: h.createdAt,
    draining_at: h.drainingAt ?? null,
  };
}

export function joinTokenFromRow(r: Row<"join_tokens">): JoinTokenRecord {
  return {
    id: r.id,
    target: r.target,
    hash: r.hash,
    usesLeft: Number(r.uses_left),
    expiresAt: r.expires_at,
    ...opt("revokedAt", r.revoked_at),
    createdAt: r.created_at,
  };
}

export function joinTokenToRow(t: JoinTokenRecord): Row<"join_tokens"> {
  return {
    id: t.id,
    target: t.target,
    hash: t.hash,
    uses_left: t.usesLeft,
    expires_at: t.expiresAt,
    created_at: t.createdAt,
    revoked_at: t.revokedAt ?? null,
  };
}
