import { type PhaseName, Version } from "@denv/spec";
import { z } from "zod";
import type { RunContext } from "../run-context.js";
import { type KindRunner, placed, requireEnvironment, requireOnline } from "./common.js";
import { recordVersion } from "./switch.js";

/** The snapshot's phases that run on the host (`record` is the cp's). */
const HOST_PHASES: readonly PhaseName[] = ["freeze", "capture layers", "capture volumes", "thaw"];

/** snapshot: the host freezes the environment at one point and captures it; the cp records the version. */
export const snapshot: KindRunner = {
  async run(ctx: RunContext) {
    const { store } = ctx.deps;
    const env = await requireEnvironment(ctx, ctx.d.environment);
    const { hostId, hostEnvId } = placed(env);
    requireOnline(ctx, hostId);
    ctx.d.hostId = hostId;
    const number = await ctx.memo("version-number", z.number(), () => store.nextVersionNumber(ctx.d.project));
    const v = await ctx.command(
      "snapshot",
      hostId,
      "env.snapshot",
      { environment: hostEnvId, number },
      { phases: HOST_PHASES },
    );
    await ctx.phase("record", async () => {
      await recordVersion(ctx, v, hostId);
      return {
        value: undefined,
        evidence: { version: v.id, method: v.method, sizes: v.sizes, host: hostId },
      };
    });
    await ctx.deps.afterVersion(ctx.d.project);
    // Where it lives is the cp's record, never the host's claim.
    const replicas = await store.listReplicas(v.id);
    return Version.parse({ ...v, host_id: hostId, source_environment: env.id, replicas });
  },
};
