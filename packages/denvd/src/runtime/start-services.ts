import { DenvError, type ServicePlan, type ServiceStartTimes } from "@denv/spec";
import { removeDefaultRoute } from "../host/netns.js";
import type { EnvironmentRecord } from "../records.js";
import type { HostContext } from "./host-context.js";
import { waitCompleted, waitHealthy } from "./wait-healthy.js";

export interface StartOptions {
  /** What the times are counted from (default: the call). */
  origin?: number;
  /** Called once, when every service has been started (the rest is waiting for health). */
  onStarted?: () => void;
}

/**
 * Starts an environment's services and waits until every one is ready. A service starts as
 * soon as its compose `depends_on` conditions hold — `service_started`: the dependency runs;
 * `service_healthy`: it passed its healthcheck; `service_completed_successfully`: it exited 0 —
 * so services whose dependencies are satisfied start together, and a dependant waits only for
 * the services it names. Containers are started through the Engine API concurrently; each
 * service's health is waited for from its own start on. With egress denied, a service's
 * default route is taken away as soon as it runs (protection 5), while its first healthchecks
 * run: it is ready with both done, and the environment with every service ready.
 *
 * On the first failure nothing more is started and every wait stops; the first error is
 * thrown once the starts under way have returned, so that a rollback finds what they started.
 * Returns each service's times, in plan order.
 */
export async function startServices(
  ctx: HostContext,
  rec: EnvironmentRecord,
  opts: StartOptions = {},
): Promise<ServiceStartTimes[]> {
  const origin = opts.origin ?? Date.now();
  const services = rec.plan.services;
  const position = new Map(services.map((s, i) => [s.name, i]));
  const abort = new AbortController();
  const times = new Map<string, ServiceStartTimes>();
  const started = new Map<string, Promise<void>>();
  const isolated = new Map<string, Promise<void>>();
  const ready = new Map<string, Promise<void>>();
  const completed = new Map<string, Promise<void>>();

  const once = (memo: Map<string, Promise<void>>, name: string, fn: () => Promise<void>) => {
    let p = memo.get(name);
    if (!p) {
      p = fn();
      // Failures are collected below; a dependant's await sees them too.
      p.catch((err: unknown) => abort.abort(err));
      memo.set(name, p);
    }
    return p;
  };
  const start = (svc: ServicePlan): Promise<void> =>
    once(started, svc.name, async () => {
      await Promise.all(svc.dependsOn.map((dep) => condition(svc, dep.service, dep.condition)));
      abort.signal.throwIfAborted();
      const t: ServiceStartTimes = {
        service: svc.name,
        start_ms: Date.now() - origin,
        running_ms: 0,
        ready_ms: 0,
      };
      times.set(svc.name, t);
      await ctx.docker.containers.start(rec.containers[svc.name] as string);
      t.running_ms = Date.now() - origin;
    });
  const routeGone = (svc: ServicePlan): Promise<void> =>
    once(isolated, svc.name, async () => {
      await start(svc);
      if (rec.plan.egress === "allow" || svc.networkMode === "none") return;
      const id = rec.containers[svc.name] as string;
      const state = await ctx.docker.containers.inspect(id);
      // A one-shot service may have exited already, or exit meanwhile: it has no namespace left to fix.
      if (!state?.running || state.pid <= 0) return;
      // An exit after the inspect, before the engine noticed, is "exited": nothing left to fix
      // (a restart gets a new namespace, which the restart watch isolates).
      await removeDefaultRoute(state.pid);
    });
  const readyOf = (svc: ServicePlan): Promise<void> =>
    once(ready, svc.name, async () => {
      await start(svc);
      // The route goes while the first healthchecks run: a service is ready with both done.
      await Promise.all([routeGone(svc), waitHealthy(ctx, rec, svc, abort.signal)]);
      const t = times.get(svc.name);
      if (t) t.ready_ms = Date.now() - origin;
    });
  const completedOf = (svc: ServicePlan): Promise<void> =>
    once(completed, svc.name, async () => {
      await start(svc);
      await waitCompleted(ctx, rec, svc, abort.signal);
    });
  const condition = (of: ServicePlan, name: string, cond: ServicePlan["dependsOn"][number]["condition"]) => {
    const target = services.find((s) => s.name === name);
    if (!target) return Promise.resolve();
    // The plan is in start order (the validator refuses cycles): a dependency comes earlier.
    if ((position.get(name) ?? 0) >= (position.get(of.name) ?? 0)) {
      return Promise.reject(
        new DenvError("internal", `service '${of.name}' depends on '${name}' out of order`),
      );
    }
    if (cond === "service_healthy") return readyOf(target);
    if (cond === "service_completed_successfully") return completedOf(target);
    return start(target);
  };

  const all = services.map((svc) => readyOf(svc));
  const allStarted = Promise.all(services.map((svc) => start(svc))).then(() => {
    if (!abort.signal.aborted) opts.onStarted?.();
  });
  const settled = await Promise.allSettled([...all, allStarted, ...completed.values()]);
  // The first failure is the cause: the abort's reason; the other failures are its echo.
  if (abort.signal.aborted) throw abort.signal.reason;
  const failed = settled.find((r): r is PromiseRejectedResult => r.status === "rejected");
  if (failed) throw failed.reason;
  return services.map((s) => times.get(s.name) as ServiceStartTimes);
}
