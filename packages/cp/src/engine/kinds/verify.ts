import { Phases } from "@denv/spec";
import { z } from "zod";
import { type KindRunner, placed, requireEnvironment, requireOnline } from "./common.js";
import { recordVersion } from "./switch.js";

/**
 * verify: the host stops the agent, snapshots, forks, probes the fork, runs the verifier there as
 * its own principal, collects the reward and cleans up. A graded, refused or failed grade is the
 * result of a succeeded deployment; the deployment fails only when grading could not run.
 */
export const verify: KindRunner = {
  async run(ctx) {
    const env = await requireEnvironment(ctx, ctx.d.environment);
    const { hostId, hostEnvId } = placed(env);
    requireOnline(ctx, hostId);
    ctx.d.hostId = hostId;
    // The episode's snapshot takes the project's next version number, like any snapshot.
    const number = await ctx.memo("version-number", z.number(), () =>
      ctx.deps.store.nextVersionNumber(ctx.d.project),
    );
    const { snapshot, ...result } = await ctx.command(
      "verify",
      hostId,
      "env.verify",
      { environment: hostEnvId, number },
      { phases: Phases.verify },
    );
    await recordVersion(ctx, snapshot, hostId);
    return result;
  },
};
