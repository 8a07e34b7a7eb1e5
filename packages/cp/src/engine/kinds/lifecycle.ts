import { DenvError, Phases } from "@denv/spec";
import { nowIso } from "../../ids.js";
import {
  environmentResult,
  fromHost,
  type KindRunner,
  placed,
  requireEnvironment,
  requireOnline,
} from "./common.js";

/** stop: the environment's services stop; its disk state stays. */
export const stop: KindRunner = {
  async run(ctx) {
    const env = await requireEnvironment(ctx, ctx.d.environment);
    const { hostId, hostEnvId } = placed(env);
    requireOnline(ctx, hostId);
    ctx.d.hostId = hostId;
    const host = await ctx.command(
      "stop",
      hostId,
      "env.stop",
      { environment: hostEnvId },
      { phases: Phases.stop },
    );
    const next = fromHost(env, host, { hostId, hostEnv: env.hostEnv as string });
    await ctx.deps.store.putEnvironment(next);
    return environmentResult(next);
  },
};

/** start: a stopped environment starts again, and is health-checked and probed. */
export const start: KindRunner = {
  async run(ctx) {
    const env = await requireEnvironment(ctx, ctx.d.environment);
    const { hostId, hostEnvId } = placed(env);
    requireOnline(ctx, hostId);
    ctx.d.hostId = hostId;
    const host = await ctx.command(
      "start",
      hostId,
      "env.start",
      { environment: hostEnvId },
      { phases: Phases.start },
    );
    const next = fromHost(env, host, { hostId, hostEnv: env.hostEnv as string });
    await ctx.deps.store.putEnvironment(next);
    return environmentResult(next);
  },
};

/** destroy: the host removes everything of the environment; the cp forgets it. */
export const destroy: KindRunner = {
  async run(ctx) {
    const env = await requireEnvironment(ctx, ctx.d.environment);
    if (env.hostId && env.hostEnv) {
      requireOnline(ctx, env.hostId);
      ctx.d.hostId = env.hostId;
      try {
        await ctx.command(
          "destroy",
          env.hostId,
          "env.destroy",
          { environment: `${env.project}/${env.hostEnv}` },
          { phases: Phases.destroy },
        );
      } catch (err) {
        // Already gone on the host (e.g. reconciled as failed): the cp forgets it all the same.
        if (!(err instanceof DenvError && err.code === "not_found")) throw err;
        ctx.finish("destroy", { note: "the host no longer held it" });
      }
    } else {
      ctx.finish("destroy", { note: "the environment ran on no host" });
    }
    await ctx.deps.store.deleteEnvironment(env.id);
    return environmentResult({ ...env, status: "destroyed", updatedAt: nowIso() });
  },
};
