import {
  DenvError,
  type EgressProbe,
  labelsFor,
  type Plan,
  Protection,
  ProviderMessages,
  type ServicePlan,
} from "@denv/spec";
import type { PhaseListener } from "../../runtime/phase-listener.js";
import type { ImageDefaults } from "../dockerfile-steps.js";
import { probeFromInside } from "../e2b/egress-probe.js";
import { lookupUser, refuseEscalation, refuseWritableSystem, type SandboxUser } from "../e2b/sandbox-user.js";
import { listBaseline } from "../sandbox-procs.js";
import { MAX_TIMEOUT_MINUTES, PROVIDER, type PrimeHost, primeName, provider } from "./prime-host.js";
import { joinNetwork, needsNetwork } from "./prime-network.js";
import type { PrimeEnvironmentRecord, PrimeVersionRecord } from "./prime-records.js";
import { asRoot, runAs } from "./prime-shell.js";
import { serviceStart, startService, waitHealthy } from "./prime-start.js";

/** What an environment is before it has a sandbox. */
export interface EnvironmentBase {
  id: string;
  project: string;
  name: string;
  plan: Plan;
  command: string;
  /** The built image's reference (a deploy) or the version id (a fork). */
  image: string;
  /** What each service's Dockerfile runs (prime-start.ts), by service name. */
  imageDefaults?: Record<string, ImageDefaults>;
  /** The verifier's own image, when it is not the agent service's: its sandbox joins the network. */
  verifierImage?: string;
  testsTar: string | undefined;
}

/** Where a sandbox starts from: a built image, or a version's checkpoint. */
export type SandboxSource = { dockerImage: string } | { checkpointId: string };

/** Prime's labels are strings: denv's key=value labels, one each. */
export function primeLabels(labels: Record<string, string>): string[] {
  return Object.entries(labels).map(([k, v]) => `${k}=${v}`);
}

/**
 * An environment's sandboxes, one per service, from images (a deploy) or checkpoints (a fork),
 * `sources` by service name: each created with the environment's labels and, unless the file is
 * a service project's that allows egress, an empty egress allowlist; with several services, joined
 * to a private network of their own (prime-network.ts: each service's `expose` open to the
 * others, each reached by its name). Then, before any command of the agent's: the agent's user
 * resolved through its sandbox's /etc/passwd (read by Prime's file API, denvd's own read, never
 * by a binary of the image) and root refused, so is a sudo or su without a password, and so is a
 * system directory the agent could write (root runs programs from there to grade; protection 1
 * and 2); each service's command started as its compose user, dependencies first, each
 * healthcheck waited for; the egress probe run from inside the agent's sandbox as the agent,
 * against the policy Prime reports (protection 5). A failure deletes what it created.
 */
export async function createEnvironment(
  host: PrimeHost,
  base: EnvironmentBase,
  sources: Record<string, SandboxSource>,
  version: PrimeVersionRecord | undefined,
  phase: PhaseListener,
): Promise<{ rec: PrimeEnvironmentRecord }> {
  const { plan, command } = base;
  const agentService = plan.services.find((s) => s.name === plan.agent.service);
  if (!agentService)
    throw new DenvError("invalid_request", `project ${plan.name} has no service ${plan.agent.service}`);
  const networkAccess = plan.egress === "allow";
  const started = Date.now();
  phase.start("place");
  phase.end("place", { host: host.hostId }, version ? "restore" : "start");
  host.inFlight.add(command);
  const made = new Map<string, string>();
  let networkId: string | undefined;
  try {
    await createSandboxes(host, base, sources, networkAccess, made);
    const sandboxOf = (service: string) => made.get(service) as string;
    const id = sandboxOf(agentService.name);
    const created = Date.now();
    if (version) phase.end("restore", { version: version.id, method: "prime-checkpoint" }, "start");
    if (needsNetwork(plan, base.verifierImage !== undefined)) {
      await joinNetwork(host, base, plan, made, (network) => {
        networkId = network;
      });
    }
    const passwd = (await provider(() => host.api.downloadFile(id, "/etc/passwd"))).toString("utf8");
    const agent = lookupUser(passwd, plan.agent.user, PROVIDER);
    const asAgent = runAs(host, id, agent.name);
    if (plan.kind === "rl-environment") {
      if (agent.uid === 0) throw new DenvError("agent_root", Protection.agentRoot(agentService.name));
      await refuseEscalation(asAgent, agent, agentService.name);
      await refuseWritableSystem(asAgent, agent, agentService.name);
    }
    // A verifier that reaches the services grades in this sandbox: its uid is not the agent's to
    // act as. One whose user the sandbox lacks cannot run here (its verify says so).
    const sharing =
      plan.kind === "rl-environment" && plan.verifier?.services !== false ? plan.verifier : undefined;
    const verifierUid = sharing ? uidOf(passwd, sharing.user) : undefined;
    // What each sandbox runs before its service: never frozen by a snapshot (several services).
    const systemProcs: Record<string, string[]> = {};
    if (plan.services.length > 1) {
      for (const sandbox of made.values())
        systemProcs[sandbox] = await provider(() => listBaseline(asRoot(host, sandbox)));
    }
    // Dependencies first (the plan's order), each healthy before what depends on it starts.
    const healthStart = Date.now();
    for (const service of plan.services) {
      const sandbox = sandboxOf(service.name);
      await volumeFolders(host, sandbox, service);
      const start = serviceStart(service, base.imageDefaults?.[service.name] ?? {});
      if (start) await startService(host, sandbox, service, start);
      await waitHealthy(host, sandbox, service, start);
    }
    phase.end("start", { containers: Object.fromEntries(made) });
    // What runs now is the service's and Prime's: whatever is not, later, is the agent's.
    const baseline = await provider(() => listBaseline(asRoot(host, id)));
    const probeStart = Date.now();
    let probe: EgressProbe | { skipped: string };
    if (networkAccess) probe = { skipped: "egress is allowed (a service project)" };
    else {
      phase.start("probe");
      probe = await probeEgress(host, id, agent, agentService.name);
      if (!probe.ok) {
        throw new DenvError("egress_leak", Protection.egressLeak(base.id, probe.findings[0] ?? "unknown"));
      }
      phase.end("probe", probe);
    }
    const done = Date.now();
    const { testsTar, ...named } = base;
    // What each other service's sandbox was made from: its image (a deploy) or the version (a fork).
    const peers: Record<string, { sandboxId: string; image: string }> = {};
    for (const [service, sandboxId] of made) {
      const from = sources[service];
      if (service !== agentService.name)
        peers[service] = { sandboxId, image: from && "dockerImage" in from ? from.dockerImage : base.image };
    }
    const rec: PrimeEnvironmentRecord = {
      ...named,
      ...(testsTar ? { testsTar } : {}),
      sandboxId: id,
      ...(Object.keys(peers).length > 0 ? { peers } : {}),
      ...(networkId ? { networkId } : {}),
      ...(plan.services.length > 1 ? { systemProcs } : {}),
      agent: plan.agent,
      agentName: agent.name,
      agentUid: agent.uid,
      ...(verifierUid !== undefined ? { verifierUid } : {}),
      networkAccess,
      ...(version ? { parentVersion: version.id } : {}),
      timings: {
        create_ms: created - started,
        start_ms: healthStart - created,
        health_ms: probeStart - healthStart,
        probe_ms: done - probeStart,
        total_ms: done - started,
      },
      probe,
      baseline,
      createdAt: new Date(started).toISOString(),
    };
    await host.records.putEnvironment(rec);
    return { rec };
  } catch (err) {
    await removeAll(host, base.id, [...made.values()], networkId);
    throw err;
  } finally {
    host.inFlight.delete(command);
  }
}

/**
 * A sandbox per service (`made` takes each id as Prime gives it, the service's name its key),
 * each running before this returns; every create is waited for, failed or not, so that the
 * caller's cleanup finds every sandbox that was made.
 */
async function createSandboxes(
  host: PrimeHost,
  base: EnvironmentBase,
  sources: Record<string, SandboxSource>,
  networkAccess: boolean,
  made: Map<string, string>,
): Promise<void> {
  const { plan, command } = base;
  const results = await Promise.allSettled(
    plan.services.map(async (service) => {
      const from = sources[service.name];
      if (!from)
        throw new DenvError("invalid_request", `service '${service.name}' has no image or checkpoint`);
      const sb = await provider(() =>
        host.api.createSandbox({
          name: primeName(base.project, base.name, service.name),
          ...from,
          env: service.environment,
          labels: primeLabels(
            labelsFor({
              host: host.hostId,
              project: base.project,
              environment: base.id,
              role: "service",
              command,
              service: service.name,
            }),
          ),
          networkAccess,
          // Prime sizes a sandbox in whole cores and GiB: the service's limits, rounded up.
          cpuCores: Math.max(1, Math.ceil(service.resources.cpus)),
          memoryGB: Math.max(1, Math.ceil(service.resources.memoryBytes / 1024 ** 3)),
          timeoutMinutes: host.timeoutMinutes ?? MAX_TIMEOUT_MINUTES,
          idempotencyKey: `${command}-${service.name}`,
        }),
      );
      made.set(service.name, sb.id);
      await provider(() => host.api.waitRunning(sb.id));
    }),
  );
  const failed = results.find((r) => r.status === "rejected");
  if (failed) throw failed.reason;
}

/**
 * The folders a service's named volumes are on its sandbox's disk (check-plan.ts: each volume is
 * one service's), made as root where the image has none, as Docker makes a mount point.
 */
async function volumeFolders(host: PrimeHost, sandboxId: string, service: ServicePlan): Promise<void> {
  if (service.volumes.length === 0) return;
  await asRoot(host, sandboxId)(
    `printf '%s\\n' "$DENV_DIRS" | while IFS= read -r d; do [ -d "$d" ] || mkdir -p -- "$d"; done`,
    { DENV_DIRS: service.volumes.map((v) => v.target).join("\n") },
  );
}

/** Deletes sandboxes and a network a failed create made; what fails is logged, not thrown. */
async function removeAll(
  host: PrimeHost,
  envId: string,
  sandboxes: string[],
  networkId?: string,
): Promise<void> {
  const log = (what: string) => (e: unknown) => host.log(`${envId}: could not delete ${what}: ${String(e)}`);
  if (networkId) await host.api.deleteNetwork(networkId).catch(log(`network ${networkId}`));
  await Promise.all(sandboxes.map((id) => host.api.deleteSandbox(id).catch(log(id))));
}

/** The egress probe from inside the sandbox, as the agent, against the host's canaries (protection 5). */
export async function probeEgress(
  host: PrimeHost,
  sandboxId: string,
  agent: SandboxUser,
  service: string,
): Promise<EgressProbe> {
  if (host.canaries.length === 0) throw new DenvError("conflict", ProviderMessages.noCanary(PROVIDER));
  const shut = await provider(() => host.api.networkShut(sandboxId));
  return provider(() =>
    probeFromInside(
      runAs(host, sandboxId, agent.name),
      {
        sandboxId,
        internetAllowed: !shut,
        policy: `prime egress policy (allowlist: ${shut ? "[]" : "not empty or not applied"})`,
      },
      service,
      host.canaries,
    ),
  );
}

/** The uid `user` has in the passwd, or undefined when it has none there. */
function uidOf(passwd: string, user: string): number | undefined {
  try {
    return lookupUser(passwd, user, PROVIDER).uid;
  } catch {
    return undefined;
  }
}
