import { Labels } from "@denv/spec/labels";
import { removeDefaultRoute } from "../host/netns.js";
import type { HostContext } from "./host-context.js";

/**
 * A service that Docker restarts (restart policy) gets a new network namespace, with a default
 * route again: take it away as soon as the engine reports the start. Returns the stop function.
 */
export function watchRestarts(ctx: HostContext): Promise<() => void> {
  return ctx.docker.onContainerStart({ [Labels.host]: ctx.hostId }, (ev) => {
    void onStart(ctx, ev.id, ev.labels[Labels.environment]).catch((err: Error) =>
      ctx.log(`restart watch: ${err.message}`),
    );
  });
}

async function onStart(ctx: HostContext, containerId: string, envId: string | undefined): Promise<void> {
  if (!envId) return;
  const rec = await ctx.records.getEnvironment(envId);
  if (rec === undefined || rec.plan.egress === "allow") return;
  const state = await ctx.docker.containers.inspect(containerId);
  if (state?.running && state.pid > 0 && state.hostConfig.networkMode !== "none")
    await removeDefaultRoute(state.pid);
}
