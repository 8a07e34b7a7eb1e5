import { rm } from "node:fs/promises";
import { DenvError, Protection } from "@denv/spec";
import { removeRejectRule } from "../host/firewall.js";
import { probeEgress } from "../probe.js";
import type { EnvironmentRecord, VersionRecord } from "../records.js";
import { captureBaseline } from "./agent-processes.js";
import type { HostContext } from "./host-context.js";
import { egressProbe } from "./host-reports.js";
import type { PhaseListener } from "./phase-listener.js";
import { startServices } from "./start-services.js";

/** Stop, start and removal of environments and versions. The caller holds the environment's lock. */

export async function stopEnvironment(
  ctx: HostContext,
  rec: EnvironmentRecord,
  phase: PhaseListener,
): Promise<void> {
  phase.start("stop");
  const order = [...rec.plan.services].reverse();
  for (const svc of order) {
    const grace = Math.ceil((svc.stopGracePeriodMs ?? 10_000) / 1000);
    await ctx.docker.containers.stop(rec.containers[svc.name] as string, grace);
  }
  rec.status = "stopped";
  await ctx.records.putEnvironment(rec);
  phase.end("stop", { stopped: order.map((s) => s.name) });
}

/**
 * Starts the services that are not running; the egress probe must pass before the environment
 * counts as running. The baseline (protection 2) is taken only of the services started here: a
 * service that kept running keeps its baseline, so nothing the agent started becomes part of it.
 */
export async function startEnvironment(
  ctx: HostContext,
  rec: EnvironmentRecord,
  phase: PhaseListener,
): Promise<void> {
  phase.start("start");
  const wasRunning = new Set<string>();
  for (const [svc, id] of Object.entries(rec.containers)) {
    if ((await ctx.docker.containers.inspect(id))?.running) wasRunning.add(svc);
  }
  await startServices(ctx, rec, {
    onStarted: () => phase.end("start", { containers: rec.containers }, "health"),
  });
  phase.end("health", { services: rec.plan.services.map((s) => s.name) });
  const fresh = await captureBaseline(ctx.docker, rec);
  for (const [svc, list] of Object.entries(fresh)) if (!wasRunning.has(svc)) rec.baseline[svc] = list;
  if (rec.plan.egress !== "allow") {
    phase.start("probe");
    const probe = egressProbe(await probeEgress(ctx.docker, ctx.canary, rec));
    if (!probe.ok) {
      for (const id of Object.values(rec.containers)) await ctx.docker.containers.stop(id, 1);
      rec.status = "stopped";
      await ctx.records.putEnvironment(rec);
      throw new DenvError(
        "egress_leak",
        Protection.egressLeak(rec.id, probe.findings.join("; ")),
        probe.findings,
      );
    }
    rec.evidence = { ...rec.evidence, probe };
    phase.end("probe", probe);
  }
  rec.status = "running";
  await ctx.records.putEnvironment(rec);
}

/** Removes the environment's containers, network, firewall rule and volumes. Versions stay. */
export async function removeEnvironment(
  ctx: HostContext,
  rec: EnvironmentRecord,
  phase: PhaseListener,
): Promise<void> {
  phase.start("destroy");
  await Promise.all(Object.values(rec.containers).map((id) => ctx.docker.containers.remove(id)));
  await ctx.agentEgress.get(rec.id)?.close();
  ctx.agentEgress.delete(rec.id);
  await removeRejectRule(rec.network.id);
  await ctx.docker.networks.remove(rec.network.id);
  for (const v of Object.values(rec.volumes)) {
    await ctx.docker.volumes.remove(v.docker);
    await ctx.store.removeLive(v.store);
  }
  await ctx.records.deleteEnvironment(rec.id);
  phase.end("destroy", { services: Object.keys(rec.containers), volumes: Object.keys(rec.volumes) });
}

/** Removes a version: its committed images, volume snapshots and tests archive (when unshared). */
export async function deleteVersion(ctx: HostContext, v: VersionRecord): Promise<void> {
  const users = (await ctx.records.environments()).filter((e) => e.parentVersion === v.id);
  if (users.length > 0) {
    throw new DenvError(
      "conflict",
      `version ${v.id} is the parent of ${users.map((u) => u.id).join(", ")}: destroy those environments first`,
    );
  }
  await ctx.records.deleteVersion(v.id);
  for (const img of Object.values(v.images)) await ctx.docker.images.remove(img.image);
  for (const vol of Object.values(v.volumes)) await ctx.store.removeSnapshot(vol.snapshot);
  if (v.testsTar) {
    const path = v.testsTar;
    const holders = [...(await ctx.records.environments()), ...(await ctx.records.versions())];
    if (!holders.some((r) => r.testsTar === path)) await rm(path, { force: true });
  }
}
