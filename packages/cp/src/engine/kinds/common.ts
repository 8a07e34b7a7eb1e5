import {
  ControlPlaneMessages,
  DenvError,
  type Environment,
  type HostEnvironment,
  parseVersionRef,
} from "@denv/spec";
import { nowIso } from "../../ids.js";
import { NotFound } from "../../services/access.js";
import { presentEnvironment } from "../../services/present.js";
import type { EnvironmentRecord, VersionRecord } from "../../store/records.js";
import type { RunContext } from "../run-context.js";

/** What a deployment kind does; `cleanup` removes what a failed attempt created. */
export interface KindRunner {
  run(ctx: RunContext): Promise<DeploymentResult>;
  cleanup?(ctx: RunContext): Promise<void>;
  /** Always runs at the end (success or failure), e.g. to delete the spooled source. */
  dispose?(ctx: RunContext): Promise<void>;
}

export type DeploymentResult = Environment | Record<string, unknown>;

/**
 * The environment's name on its host: `${env}-${6 chars of the deployment id}`, so a deploy
 * builds next to the running one and a switch is a pointer change. Stays within NAME_PATTERN.
 */
export function hostEnvName(name: string, deploymentId: string): string {
  const suffix = deploymentId
    .replace(/^[a-z]+_/, "")
    .replace(/[^a-z0-9]/g, "")
    .slice(0, 6);
  return `${name.slice(0, 33)}-${suffix}`;
}

export async function requireEnvironment(ctx: RunContext, id: string): Promise<EnvironmentRecord> {
  const env = await ctx.deps.store.getEnvironment(id);
  if (!env) throw NotFound.environment(id);
  return env;
}

/** The host and host-side id of an environment that lives somewhere. */
export function placed(env: EnvironmentRecord): { hostId: string; hostEnvId: string } {
  if (!env.hostId || !env.hostEnv) {
    throw new DenvError("conflict", `environment ${env.id} is ${env.status} and runs on no host`);
  }
  return { hostId: env.hostId, hostEnvId: `${env.project}/${env.hostEnv}` };
}

/** Fails fast on a first attempt against an offline host; a resumed run waits for it instead. */
export function requireOnline(ctx: RunContext, hostId: string): void {
  if (!ctx.deps.hub.isOnline(hostId) && !ctx.resumed) {
    throw new DenvError("conflict", ControlPlaneMessages.hostOffline(hostId));
  }
}

/** `PROJECT@vN` or `N` -> the version record of `project`. */
export async function resolveVersion(ctx: RunContext, project: string, ref: string): Promise<VersionRecord> {
  const number = /^\d+$/.test(ref) ? Number(ref) : parseVersionRef(ref).number;
  const id = `${project}@v${number}`;
  if (!/^\d+$/.test(ref) && parseVersionRef(ref).project !== project) throw NotFound.version(ref);
  const v = await ctx.deps.store.getVersion(project, number);
  if (!v) throw NotFound.version(id);
  return v;
}

/** The cp's record of an environment after its host created (or changed) it. */
export function fromHost(
  base: EnvironmentRecord,
  host: HostEnvironment,
  where: { hostId: string; hostEnv: string; version?: string; parentVersion?: string },
): EnvironmentRecord {
  const { version, parentVersion, ...rest } = base;
  return {
    ...rest,
    hostId: where.hostId,
    hostEnv: where.hostEnv,
    status: host.status,
    ...((where.version ?? version) ? { version: where.version ?? version } : {}),
    ...((where.parentVersion ?? host.parent_version ?? parentVersion)
      ? { parentVersion: where.parentVersion ?? host.parent_version ?? parentVersion }
      : {}),
    services: host.services,
    agent: host.agent,
    evidence: host.evidence,
    updatedAt: nowIso(),
  };
}

export function pendingEnvironment(id: string, extra: Partial<EnvironmentRecord> = {}): EnvironmentRecord {
  const [project = "", name = ""] = id.split("/");
  const now = nowIso();
  return {
    id,
    project,
    name,
    status: "pending",
    sandbox: false,
    services: [],
    createdAt: now,
    updatedAt: now,
    ...extra,
  };
}

/**
 * Destroys a host environment without holding the deployment up: a host that is offline or
 * answers with an error is logged, not waited for (denvd collects what it no longer owns).
 */
export async function destroyQuietly(
  ctx: RunContext,
  step: string,
  hostId: string,
  hostEnvId: string,
): Promise<void> {
  try {
    await ctx.deps.hub.send(
      hostId,
      "env.destroy",
      { environment: hostEnvId },
      { id: `${ctx.d.id}.${step}`, timeoutMs: ctx.deps.commandTimeoutMs, durable: false },
    );
    ctx.log(`destroyed ${hostEnvId} on ${hostId}`);
  } catch (err) {
    if (err instanceof DenvError && err.code === "not_found") return;
    ctx.log(
      `could not destroy ${hostEnvId} on ${hostId}: ${err instanceof Error ? err.message : String(err)}`,
    );
  }
}

/**
 * The environment as the deployment left it: reachable unless destroyed, since the deployment's
 * last command just reached its host (GET /v1/environments/... says whether it still is).
 */
export function environmentResult(env: EnvironmentRecord): Environment {
  return presentEnvironment(env, () => env.status !== "destroyed");
}
