import { randomBytes } from "node:crypto";
import {
  type AgentEvidence,
  DenvError,
  type EgressProbe,
  type EnvironmentEvidence,
  HostRefusals,
  isRootUser,
  type Plan,
  Protection,
} from "@denv/spec";
import { type MirrorEgress, openMirrorEgress } from "../build/mirror-egress.js";
import { containerSpec, isProtected } from "../container-spec.js";
import type { NetworkInfo } from "../docker/docker-client.js";
import { rejectToHost, removeRejectRule } from "../host/firewall.js";
import { probeEgress } from "../probe.js";
import type { EnvironmentRecord, VersionRecord } from "../records.js";
import { captureBaseline } from "./agent-processes.js";
import { decideDiskCaps } from "./disk-caps.js";
import type { HostContext } from "./host-context.js";
import { egressProbe } from "./host-reports.js";
import { ownWorkdir } from "./own-workdir.js";
import type { PhaseListener } from "./phase-listener.js";
import { resolveUid } from "./principals.js";
import { startServices } from "./start-services.js";
import { freeSubnet } from "./subnets.js";
import type { Undo } from "./undo.js";
import { waitHealthy } from "./wait-healthy.js";

/** What deploy and fork know before an environment exists. */
export type EnvironmentBase = Pick<
  EnvironmentRecord,
  "id" | "project" | "name" | "plan" | "command" | "images" | "parentVersion" | "verifierImage" | "testsTar"
>;

/**
 * Network, volumes, containers in dependency order, health, protections, probe. Used by deploy
 * (fresh volumes) and fork (volumes cloned from `from`). Whatever it creates is pushed on `undo`,
 * which the caller runs on failure. A deploy creates everything in its `place` phase; a fork
 * creates its network there and restores its volumes and containers in `restore`.
 */
export async function materialize(
  ctx: HostContext,
  base: EnvironmentBase,
  from: VersionRecord | undefined,
  undo: Undo,
  phase: PhaseListener,
): Promise<EnvironmentRecord> {
  const { plan, command } = base;
  phase.start("place");
  const t0 = Date.now();
  const envRef = { project: base.project, id: base.id };
  const egressDenied = plan.egress !== "allow";
  const disk = await decideDiskCaps(ctx, plan);
  const agentRuntime = await sandboxRuntime(ctx, plan);

  const network = await createNetwork(ctx, base, egressDenied);
  undo.push(`network ${network.name}`, () => ctx.docker.networks.remove(network.id));
  if (egressDenied) {
    await rejectToHost(network.id);
    undo.push(`firewall rule of ${network.name}`, () => removeRejectRule(network.id));
  }
  // Egress by phase: with x-denv.egress: mirrors the agent's episode reaches the host's package
  // mirrors through denvd's proxy on the gateway, and nothing else (the probe still runs).
  let egress: MirrorEgress | undefined;
  if (plan.egress === "mirrors") {
    const opened = await openMirrorEgress(network, ctx.settings.buildMirrors);
    egress = opened;
    undo.push(`mirror proxy of ${network.name}`, () => opened.close());
  }

  if (from) phase.end("place", { host: ctx.hostId }, "restore");
  const volumes: EnvironmentRecord["volumes"] = {};
  const volumeNames: Record<string, string> = {};
  for (const vol of plan.volumes) {
    const storeId = `${base.project}-${base.name}-${vol}-${randomBytes(4).toString("hex")}`;
    const snap = from?.volumes[vol];
    const path = snap
      ? await ctx.store.clone(snap.snapshot, storeId, disk.volumeBytes)
      : await ctx.store.create(storeId, disk.volumeBytes);
    undo.push(`store ${storeId}`, () => ctx.store.removeLive(storeId));
    const dockerName = ctx.dockerName(base.project, base.name, vol);
    await ctx.docker.volumes.createBound(
      dockerName,
      path,
      ctx.labels(envRef, "service", command, { volume: vol }),
    );
    undo.push(`volume ${dockerName}`, () => ctx.docker.volumes.remove(dockerName));
    volumes[vol] = { docker: dockerName, store: storeId };
    volumeNames[vol] = dockerName;
  }

  const rec: EnvironmentRecord = {
    ...base,
    status: "running",
    network: { id: network.id, name: network.name, subnet: network.subnet, gateway: network.gateway },
    containers: {},
    volumes,
    baseline: {},
    createdAt: new Date().toISOString(),
    evidence: {},
  };
  for (const svc of plan.services) {
    const image = base.images[svc.name];
    if (!image) throw new DenvError("internal", `no image recorded for service ${svc.name}`);
    const id = await ctx.docker.containers.create(
      containerSpec({
        plan,
        service: svc,
        image: image.imageId,
        containerName: ctx.dockerName(base.project, base.name, svc.name),
        networkName: network.name,
        volumeNames,
        layerCapBytes: disk.layerBytes,
        labels: ctx.labels(envRef, "service", command, { service: svc.name, version: base.parentVersion }),
        agentRuntime,
        agentEnv: egress?.env,
        restored: from !== undefined,
      }),
    );
    rec.containers[svc.name] = id;
    undo.push(`container ${svc.name}`, () => ctx.docker.containers.remove(id));
  }
  let agentEvidence: AgentEvidence | undefined;
  if (isProtected(plan)) {
    const agent = rec.containers[plan.agent.service] as string;
    const uid = (await resolveUid(ctx.docker, agent, plan.agent.user)) ?? null;
    const root = isRootUser(plan.agent.user) || uid === 0;
    // The validator refused root spellings outside a sandbox; a name can still be uid 0 in the
    // image's passwd.
    if (root && agentRuntime === undefined) {
      throw new DenvError("agent_root", Protection.agentRoot(plan.agent.service));
    }
    agentEvidence = {
      service: plan.agent.service,
      user: plan.agent.user,
      uid,
      root,
      confinement: agentRuntime === undefined ? "container" : "gvisor",
      ...(agentRuntime === undefined ? {} : { runtime: agentRuntime }),
    };
    if (agentRuntime !== undefined) rec.agentRuntime = agentRuntime;
    if (!from) await ownWorkdir(ctx.docker, rec);
  }
  const tCreated = Date.now();
  if (from) phase.end("restore", { version: from.id, method: ctx.store.method });
  else phase.end("place", { host: ctx.hostId });

  phase.start("start");
  await startServices(ctx, rec);
  const tStarted = Date.now();
  phase.end("start", { containers: rec.containers });
  phase.start("health");
  await waitHealthy(ctx, rec, plan.services);
  const tHealthy = Date.now();
  phase.end("health", { services: plan.services.map((s) => s.name) });
  rec.baseline = await captureBaseline(ctx.docker, rec);

  await ctx.settings.beforeProbe?.(rec);
  let probe: EgressProbe | undefined;
  if (egressDenied) {
    phase.start("probe");
    probe = egressProbe(await probeEgress(ctx.docker, ctx.canary, rec));
    if (!probe.ok) {
      throw new DenvError(
        "egress_leak",
        Protection.egressLeak(base.id, probe.findings.join("; ")),
        probe.findings,
      );
    }
    phase.end("probe", probe);
  }
  const evidence: EnvironmentEvidence = {
    placement: { host: ctx.hostId, reason: "the host this runtime drives" },
    network: { name: network.name, subnet: network.subnet, internal: egressDenied },
    volumes: { method: ctx.store.method, from: from?.id ?? null },
    images: Object.fromEntries(Object.entries(base.images).map(([k, v]) => [k, v.imageId])),
    timings: {
      create_ms: tCreated - t0,
      start_ms: tStarted - tCreated,
      health_ms: tHealthy - tStarted,
      probe_ms: probe?.duration_ms ?? 0,
      total_ms: Date.now() - t0,
    },
    probe: probe ?? { skipped: "egress allowed (service project)" },
    disk: disk.evidence,
    caps: {
      memory_bytes: plan.services.reduce((n, svc) => n + svc.resources.memoryBytes, 0),
      cpus: plan.services.reduce((n, svc) => n + svc.resources.cpus, 0),
      pids: plan.services.reduce((n, svc) => n + svc.resources.pids, 0),
    },
    ...(agentEvidence ? { agent: agentEvidence } : {}),
    egress: {
      mode: plan.egress,
      ...(egress ? { mirrors: [...ctx.settings.buildMirrors], proxy: egress.url } : {}),
    },
  };
  if (egress) {
    rec.egressProxyPort = egress.port;
    ctx.agentEgress.set(rec.id, egress);
    undo.push(`mirror proxy entry of ${rec.id}`, async () => {
      ctx.agentEgress.delete(rec.id);
    });
  }
  rec.evidence = evidence;
  await ctx.records.putEnvironment(rec);
  undo.push(`record ${rec.id}`, () => ctx.records.deleteEnvironment(rec.id));
  ctx.log(`${rec.id} ready in ${Date.now() - t0} ms`);
  return rec;
}

/** The environment's own bridge network, on a /24 of the host's pool no other network uses. */
async function createNetwork(
  ctx: HostContext,
  base: EnvironmentBase,
  internal: boolean,
): Promise<NetworkInfo> {
  const name = ctx.dockerName(base.project, base.name);
  const labels = ctx.labels({ project: base.project, id: base.id }, "service", base.command);
  return ctx.locks.with("#subnet", async () => {
    // Another runtime on the same engine may take the same /24 between our look and our
    // create: the engine refuses the overlap, and we look again.
    for (let attempt = 0; ; attempt++) {
      const { subnet, gateway } = await freeSubnet(ctx);
      try {
        return await ctx.docker.networks.create({ name, internal, subnet, gateway, labels });
      } catch (err) {
        if (attempt >= 5 || !/overlap/i.test((err as Error).message)) throw err;
      }
    }
  });
}

/**
 * The engine runtime a sandboxed agent service runs under, refused before anything is created
 * when the engine lacks it; undefined when the agent is not sandboxed.
 */
export async function sandboxRuntime(ctx: HostContext, plan: Plan): Promise<string | undefined> {
  if (plan.agent.sandbox === undefined) return undefined;
  const runtime = ctx.settings.gvisorRuntime;
  if (!(await ctx.docker.runtimes()).includes(runtime)) {
    throw new DenvError("invalid_request", HostRefusals.sandboxUnavailable(plan.agent.sandbox, runtime));
  }
  return runtime;
}
