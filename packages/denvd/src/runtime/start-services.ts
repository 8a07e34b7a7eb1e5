import { removeDefaultRoute } from "../host/netns.js";
import type { EnvironmentRecord } from "../records.js";
import type { HostContext } from "./host-context.js";
import { waitCompleted, waitHealthy } from "./wait-healthy.js";

/**
 * Starts an environment's services in dependency order (compose `depends_on` conditions). With
 * egress denied, each service's default route is taken away as soon as it runs (protection 5).
 */
export async function startServices(ctx: HostContext, rec: EnvironmentRecord): Promise<void> {
  for (const svc of rec.plan.services) {
    for (const dep of svc.dependsOn) {
      const target = rec.plan.services.find((s) => s.name === dep.service);
      if (!target) continue;
      if (dep.condition === "service_healthy") await waitHealthy(ctx, rec, [target]);
      if (dep.condition === "service_completed_successfully") await waitCompleted(ctx, rec, target);
    }
    const id = rec.containers[svc.name] as string;
    await ctx.docker.containers.start(id);
    if (rec.plan.egress !== "allow" && svc.networkMode !== "none") {
      const state = await ctx.docker.containers.inspect(id);
      // A one-shot service may have exited already: it has no namespace left to fix.
      if (state?.running && state.pid > 0) await removeDefaultRoute(state.pid);
    }
  }
}
