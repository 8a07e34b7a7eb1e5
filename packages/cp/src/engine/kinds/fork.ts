import type { HostEnvironment, PhaseName } from "@denv/spec";
import { z } from "zod";
import { NotFound } from "../../services/access.js";
import { ForkState, PlacementValue, RollbackState, TransferValue } from "../requests.js";
import type { RunContext } from "../run-context.js";
import { transferVersion } from "../transfer.js";
import {
  destroyQuietly,
  environmentResult,
  fromHost,
  hostEnvName,
  type KindRunner,
  pendingEnvironment,
  resolveVersion,
} from "./common.js";
import { switchTo } from "./switch.js";

/** The fork's phases that run on the host (`place` is the cp's). */
const HOST_PHASES: readonly PhaseName[] = ["restore", "start", "health", "probe"];

/**
 * Restores a version as a new host environment where placement put it: a host that holds the
 * snapshot, or one it is streamed to first (the `transfer` phase).
 */
async function restore(
  ctx: RunContext,
  versionRef: string,
): Promise<{ hostId: string; hostEnv: string; version: string; created: HostEnvironment }> {
  const version = await resolveVersion(ctx, ctx.d.project, versionRef);
  const place = await ctx.cpPhase("place", PlacementValue, async () => {
    const p = await ctx.deps.placer.place({ version, deployment: ctx.d.id });
    return {
      value: { hostId: p.hostId, reason: p.reason, ...(p.transfer ? { transfer: p.transfer } : {}) },
      evidence: p.evidence,
    };
  });
  ctx.d.hostId = place.hostId;
  const transfer = place.transfer;
  if (transfer) {
    await ctx.cpPhase("transfer", TransferValue, async () => {
      const out = await transferVersion(ctx.deps, {
        version: version.id,
        from: transfer.from,
        to: place.hostId,
        id: `${ctx.d.id}.transfer`,
        timeoutMs: ctx.deps.commandTimeoutMs,
        path: ctx.deps.transferPath,
      });
      return { value: out, evidence: out };
    });
  }
  const hostEnv = hostEnvName(ctx.d.environment.split("/")[1] ?? "fork", ctx.d.id);
  const created = await ctx.command(
    "fork",
    place.hostId,
    "env.fork",
    { version: version.id, name: hostEnv },
    { phases: HOST_PHASES },
  );
  return { hostId: place.hostId, hostEnv, version: version.id, created };
}

async function destroyAttempt(ctx: RunContext): Promise<void> {
  if (!ctx.d.hostId) return;
  const hostEnv = hostEnvName(ctx.d.environment.split("/")[1] ?? "fork", ctx.d.id);
  await destroyQuietly(ctx, "cleanup", ctx.d.hostId, `${ctx.d.project}/${hostEnv}`);
}

/** fork (and a sandbox's create): a new environment from a version. */
export const fork: KindRunner = {
  async run(ctx) {
    const req = ctx.request(ForkState);
    await ctx.memo("env", z.boolean(), async () => {
      await ctx.deps.store.putEnvironment(
        pendingEnvironment(ctx.d.environment, {
          version: req.version,
          parentVersion: req.version,
          ...(req.sandbox ? { sandbox: true, expiresAt: req.sandbox.expires_at } : {}),
          ...(req.pool ? { pool: true } : {}),
        }),
      );
      return true;
    });
    const r = await restore(ctx, req.version);
    const base = await ctx.deps.store.getEnvironment(ctx.d.environment);
    if (!base) throw NotFound.environment(ctx.d.environment);
    const env = fromHost(base, r.created, {
      hostId: r.hostId,
      hostEnv: r.hostEnv,
      version: r.version,
      parentVersion: r.version,
    });
    await ctx.deps.store.putEnvironment(env);
    return environmentResult(env);
  },
  async cleanup(ctx) {
    await destroyAttempt(ctx);
    if (ctx.d.state.steps.env === true) await ctx.deps.store.deleteEnvironment(ctx.d.environment);
  },
};

/** rollback: restore an older version into a new host environment, then switch to it. */
export const rollback: KindRunner = {
  async run(ctx) {
    const req = ctx.request(RollbackState);
    const r = await restore(ctx, req.version);
    const env = await switchTo(ctx, (base) =>
      fromHost(base, r.created, {
        hostId: r.hostId,
        hostEnv: r.hostEnv,
        version: r.version,
        parentVersion: r.version,
      }),
    );
    return environmentResult(env);
  },
  cleanup: destroyAttempt,
};
