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
import { createOnFreeSubnet } from "./subnets.js";
import { settleAll, type Undo } from "./undo.js";

/** What deploy and fork know before an environment exists. */
export type EnvironmentBase = Pick<
  EnvironmentRecord,
  "id" | "project" | "name" | "plan" | "command" | "images" | "parentVersion" | "verifierImage" | "testsTar"
>;

/**
 * Network, volumes, containers, start in dependency order, health, protections, probe. Used by
 * deploy (fresh volumes) and fork (volumes cloned from `from`). Whatever it creates is pushed on
 * `undo`, which the caller runs on failure. A deploy creates everything in its `place` phase; a
 * fork creates its network there and restores its volumes and containers in `restore`.
 *
 * What does not depend on another step runs at once (the volumes while the network is created,
 * the host's firewall rule while containers are created; the volumes, and the containers, among
 * themselves); what does waits for exactly that: containers for the network and the volumes,
 * the first start for the firewall rule, a service for its `depends_on` conditions
 * (startServices).
 */
export async function materialize(
  ctx: HostContext,
  base: EnvironmentBase,
  from: VersionRecord | undefined,
  undo: Undo,
  phase: PhaseListener,
  opts: { start: boolean } = { start: true },
): Promise<EnvironmentRecord> {
  const { plan } = base;
  phase.start("place");
  const t0 = Date.now();
  const egressDenied = plan.egress !== "allow";
  const disk = await decideDiskCaps(ctx, plan);
  const agentRuntime = await sandboxRuntime(ctx, plan);

  // Volumes need no network: they are cloned (or made) while the network is created.
  const volumesMade = createVolumes(ctx, base, from, disk.volumeBytes, undo).then((volumes) => ({
    volumes,
    volumesMs: Date.now() - t0,
  }));
  // Awaited below; a failure meanwhile is not an unhandled rejection.
  volumesMade.catch(() => undefined);
  const network = await createNetwork(ctx, base, egressDenied).catch(async (err: unknown) => {
    await volumesMade.catch(() => undefined);
    throw err;
  });
  undo.push(`network ${network.name}`, () => ctx.docker.networks.remove(network.id));
  const tNetwork = Date.now();
  // No container runs before the start below, which waits for the reject rule: it goes in
  // while the volumes and containers are created. Undone even when only part of it went in.
  let firewallMs = 0;
  const firewall = egressDenied
    ? (async () => {
        undo.push(`firewall rule of ${network.name}`, () => removeRejectRule(network.id));
        await rejectToHost(network.id);
        firewallMs = Date.now() - tNetwork;
      })()
    : Promise.resolve();
  // Egress by phase: with x-denv.egress: mirrors the agent's episode reaches the host's package
  // mirrors through denvd's proxy on the gateway, and nothing else (the probe still runs). Its
  // opening sits above the reject rules, so it goes in after them.
  const mirror: Promise<MirrorEgress | undefined> =
    plan.egress === "mirrors"
      ? firewall.then(async () => {
          const opened = await openMirrorEgress(network, ctx.settings.buildMirrors);
          undo.push(`mirror proxy of ${network.name}`, () => opened.close());
          return opened;
        })
      : Promise.resolve(undefined);
  const created = (async () => {
    if (from) phase.end("place", { host: ctx.hostId }, "restore");
    const { volumes, volumesMs } = await volumesMade;
    const tContainers = Date.now();
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
    rec.containers = await createContainers(ctx, base, undo, {
      networkName: network.name,
      volumeNames: Object.fromEntries(Object.entries(volumes).map(([vol, v]) => [vol, v.docker])),
      layerCapBytes: disk.layerBytes,
      agentRuntime,
      agentEnv: (await mirror)?.env,
      restored: from !== undefined,
    });
    const agent = await agentPrincipal(ctx, rec, agentRuntime, from === undefined);
    return { rec, agent, volumesMs, containersMs: Date.now() - tContainers };
  })();
  // Whatever fails, the steps under way end before the rollback runs.
  const [, egress, made] = await settleAll([firewall, mirror, created]);
  const { rec, agent: agentEvidence } = made;
  const tCreated = Date.now();
  if (from) phase.end("restore", { version: from.id, method: ctx.store.method });
  else phase.end("place", { host: ctx.hostId });

  if (!opts.start) {
    // Nothing will run in it to use the agent's mirror proxy (x-denv.egress: mirrors).
    await egress?.close();
    return notStarted(ctx, rec, from, { t0, tNetwork, firewallMs, ...made }, undo);
  }

  phase.start("start");
  let tStarted = 0;
  const services = await startServices(ctx, rec, {
    origin: t0,
    onStarted: () => {
      tStarted = Date.now();
      phase.end("start", { containers: rec.containers }, "health");
    },
  });
  const tHealthy = Date.now();
  phase.end("health", { services: plan.services.map((s) => s.name) });
  rec.baseline = await captureBaseline(ctx.docker, rec);
  const tBaseline = Date.now();

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
    ...standingEvidence(ctx, rec, from),
    timings: {
      create_ms: tCreated - t0,
      start_ms: tStarted - tCreated,
      health_ms: tHealthy - tStarted,
      probe_ms: probe?.duration_ms ?? 0,
      total_ms: Date.now() - t0,
      network_ms: tNetwork - t0,
      firewall_ms: firewallMs,
      volumes_ms: made.volumesMs,
      containers_ms: made.containersMs,
      baseline_ms: tBaseline - tHealthy,
      services,
    },
    probe: probe ?? { skipped: "egress allowed (service project)" },
    disk: disk.evidence,
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

/** What an environment's evidence says of where it stands and what it holds, started or not. */
function standingEvidence(ctx: HostContext, rec: EnvironmentRecord, from: VersionRecord | undefined) {
  const { plan } = rec;
  return {
    placement: { host: ctx.hostId, reason: "the host this runtime drives" },
    network: { name: rec.network.name, subnet: rec.network.subnet, internal: plan.egress !== "allow" },
    volumes: { method: ctx.store.method, from: from?.id ?? null },
    images: Object.fromEntries(Object.entries(rec.images).map(([k, v]) => [k, v.imageId])),
    caps: {
      memory_bytes: plan.services.reduce((n, svc) => n + svc.resources.memoryBytes, 0),
      cpus: plan.services.reduce((n, svc) => n + svc.resources.cpus, 0),
      pids: plan.services.reduce((n, svc) => n + svc.resources.pids, 0),
    },
  };
}

/** Why a fork whose services were created and not started has no probe: nothing in it runs. */
export const NOT_STARTED =
  "no service of this fork was started (x-denv.verifier.services: false): nothing in it runs, and the verifier has no network";

/**
 * A fork whose containers, volumes and network exist and none of whose services was started:
 * its disk state for a verifier that reads files. Nothing runs in it, so there is no health to
 * wait for, no baseline of processes and nothing to probe; it is recorded `stopped`.
 */
async function notStarted(
  ctx: HostContext,
  rec: EnvironmentRecord,
  from: VersionRecord | undefined,
  t: { t0: number; tNetwork: number; firewallMs: number; volumesMs: number; containersMs: number },
  undo: Undo,
): Promise<EnvironmentRecord> {
  const { plan } = rec;
  rec.status = "stopped";
  rec.evidence = {
    ...standingEvidence(ctx, rec, from),
    timings: {
      create_ms: Date.now() - t.t0,
      start_ms: 0,
      health_ms: 0,
      probe_ms: 0,
      total_ms: Date.now() - t.t0,
      network_ms: t.tNetwork - t.t0,
      firewall_ms: t.firewallMs,
      volumes_ms: t.volumesMs,
      containers_ms: t.containersMs,
    },
    probe: { skipped: NOT_STARTED },
    egress: { mode: plan.egress },
  };
  await ctx.records.putEnvironment(rec);
  undo.push(`record ${rec.id}`, () => ctx.records.deleteEnvironment(rec.id));
  ctx.log(`${rec.id} created, not started, in ${Date.now() - t.t0} ms`);
  return rec;
}

/** The environment's live volumes, all at once: fresh ones, or clones of `from`'s snapshots. */
async function createVolumes(
  ctx: HostContext,
  base: EnvironmentBase,
  from: VersionRecord | undefined,
  capBytes: number | undefined,
  undo: Undo,
): Promise<EnvironmentRecord["volumes"]> {
  const envRef = { project: base.project, id: base.id };
  const made = await settleAll(
    base.plan.volumes.map(async (vol) => {
      const storeId = `${base.project}-${base.name}-${vol}-${randomBytes(4).toString("hex")}`;
      const snap = from?.volumes[vol];
      const path = snap
        ? await ctx.store.clone(snap.snapshot, storeId, capBytes)
        : await ctx.store.create(storeId, capBytes);
      undo.push(`store ${storeId}`, () => ctx.store.removeLive(storeId));
      const dockerName = ctx.dockerName(base.project, base.name, vol);
      await ctx.docker.volumes.createBound(
        dockerName,
        path,
        ctx.labels(envRef, "service", base.command, { volume: vol }),
      );
      undo.push(`volume ${dockerName}`, () => ctx.docker.volumes.remove(dockerName));
      return [vol, { docker: dockerName, store: storeId }] as const;
    }),
  );
  return Object.fromEntries(made);
}

/** The services' containers, created all at once; container id per service, in plan order. */
async function createContainers(
  ctx: HostContext,
  base: EnvironmentBase,
  undo: Undo,
  o: {
    networkName: string;
    volumeNames: Record<string, string>;
    layerCapBytes: number | undefined;
    agentRuntime: string | undefined;
    agentEnv: Record<string, string> | undefined;
    restored: boolean;
  },
): Promise<Record<string, string>> {
  const { plan } = base;
  const envRef = { project: base.project, id: base.id };
  const ids = await settleAll(
    plan.services.map(async (svc) => {
      const image = base.images[svc.name];
      if (!image) throw new DenvError("internal", `no image recorded for service ${svc.name}`);
      const id = await ctx.docker.containers.create(
        containerSpec({
          plan,
          service: svc,
          image: image.imageId,
          containerName: ctx.dockerName(base.project, base.name, svc.name),
          networkName: o.networkName,
          volumeNames: o.volumeNames,
          layerCapBytes: o.layerCapBytes,
          labels: ctx.labels(envRef, "service", base.command, {
            service: svc.name,
            version: base.parentVersion,
          }),
          agentRuntime: o.agentRuntime,
          agentEnv: o.agentEnv,
          restored: o.restored,
        }),
      );
      undo.push(`container ${svc.name}`, () => ctx.docker.containers.remove(id));
      return [svc.name, id] as const;
    }),
  );
  return Object.fromEntries(ids);
}

/**
 * Protection 1 at creation: who the agent is in its image (a name can be uid 0 in the image's
 * passwd, which the validator cannot see), refused when that is root outside a sandbox; a fresh
 * environment's agent is given its workdir. Undefined for a project that is not protected.
 */
async function agentPrincipal(
  ctx: HostContext,
  rec: EnvironmentRecord,
  agentRuntime: string | undefined,
  fresh: boolean,
): Promise<AgentEvidence | undefined> {
  const { plan } = rec;
  if (!isProtected(plan)) return undefined;
  const agent = rec.containers[plan.agent.service] as string;
  const uid = (await resolveUid(ctx.docker, agent, plan.agent.user)) ?? null;
  const root = isRootUser(plan.agent.user) || uid === 0;
  if (root && agentRuntime === undefined) {
    throw new DenvError("agent_root", Protection.agentRoot(plan.agent.service));
  }
  if (agentRuntime !== undefined) rec.agentRuntime = agentRuntime;
  if (fresh) await ownWorkdir(ctx.docker, rec);
  return {
    service: plan.agent.service,
    user: plan.agent.user,
    uid,
    root,
    confinement: agentRuntime === undefined ? "container" : "gvisor",
    ...(agentRuntime === undefined ? {} : { runtime: agentRuntime }),
    ...(agentRuntime !== undefined && plan.agent.capabilities?.length
      ? { capabilities: plan.agent.capabilities }
      : {}),
  };
}

/** The environment's own bridge network, on a /24 of the host's pool no other network uses. */
async function createNetwork(
  ctx: HostContext,
  base: EnvironmentBase,
  internal: boolean,
): Promise<NetworkInfo> {
  const name = ctx.dockerName(base.project, base.name);
  const labels = ctx.labels({ project: base.project, id: base.id }, "service", base.command);
  return ctx.locks.with("#subnet", () =>
    createOnFreeSubnet(ctx, ({ subnet, gateway }) =>
      ctx.docker.networks.create({ name, internal, subnet, gateway, labels }),
    ),
  );
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
