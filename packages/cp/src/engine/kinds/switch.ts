import { type CommandResult, DenvError } from "@denv/spec";
import { z } from "zod";
import type { EnvironmentRecord } from "../../store/records.js";
import type { RunContext } from "../run-context.js";
import { destroyQuietly, requireEnvironment } from "./common.js";

const SwitchValue = z.object({
  previous: z.object({ hostId: z.string(), hostEnv: z.string() }).optional(),
});

/**
 * Stores a version the host just captured (once, even when a resumed run gets here again). The
 * host is the one the cp sent the command to, whatever the result says.
 */
export async function recordVersion(
  ctx: RunContext,
  v: CommandResult<"env.snapshot">,
  hostId: string,
): Promise<void> {
  await ctx.memo("record-version", z.boolean(), async () => {
    try {
      await ctx.deps.store.createVersion({ ...v, host_id: hostId, source_environment: ctx.d.environment });
    } catch (err) {
      const existing = await ctx.deps.store.getVersion(v.project, v.number);
      if (!(err instanceof DenvError && err.code === "conflict" && existing?.host_id === hostId)) throw err;
    }
    return true;
  });
}

/**
 * The "switch" phase: PROJECT/ENV now points at the new host environment (and version); only
 * then is the previous host environment destroyed. Until this phase the environment stays on
 * its previous version, so a failure anywhere before leaves it untouched.
 */
export async function switchTo(
  ctx: RunContext,
  make: (base: EnvironmentRecord) => EnvironmentRecord,
): Promise<EnvironmentRecord> {
  const { previous } = await ctx.cpPhase("switch", SwitchValue, async () => {
    const base = await requireEnvironment(ctx, ctx.d.environment);
    const next = make(base);
    await ctx.deps.store.putEnvironment(next);
    const moved =
      base.hostId && base.hostEnv && (base.hostId !== next.hostId || base.hostEnv !== next.hostEnv);
    const prev = moved ? { hostId: base.hostId as string, hostEnv: base.hostEnv as string } : undefined;
    return {
      value: prev ? { previous: prev } : {},
      evidence: {
        environment: next.id,
        host: next.hostId,
        host_env: next.hostEnv,
        version: next.version,
        ...(prev ? { previous: { host: prev.hostId, host_env: prev.hostEnv, version: base.version } } : {}),
      },
    };
  });
  if (previous) {
    await destroyQuietly(ctx, "destroy-previous", previous.hostId, `${ctx.d.project}/${previous.hostEnv}`);
  }
  return requireEnvironment(ctx, ctx.d.environment);
}
