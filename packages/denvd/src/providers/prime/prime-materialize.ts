import { DenvError, type EgressProbe, labelsFor, type Plan, Protection, ProviderMessages } from "@denv/spec";
import type { PhaseListener } from "../../runtime/phase-listener.js";
import { startCommands } from "../e2b/build-template.js";
import { probeFromInside } from "../e2b/egress-probe.js";
import {
  lookupUser,
  refuseEscalation,
  refuseWritableSystem,
  type SandboxUser,
  SYSTEM_PATH,
} from "../e2b/sandbox-user.js";
import { type AsRoot, listBaseline } from "../sandbox-procs.js";
import { waitHealthyWith } from "../service-health.js";
import { MAX_TIMEOUT_MINUTES, PROVIDER, type PrimeHost, provider } from "./prime-host.js";
import type { PrimeEnvironmentRecord, PrimeVersionRecord } from "./prime-records.js";

/** What an environment is before it has a sandbox. */
export interface EnvironmentBase {
  id: string;
  project: string;
  name: string;
  plan: Plan;
  command: string;
  /** The built image's reference (a deploy) or the version id (a fork). */
  image: string;
  testsTar: string | undefined;
}

/** Where a sandbox starts from: a built image, or a version's checkpoint. */
export type SandboxSource = { dockerImage: string } | { checkpointId: string };

/** Where the service's output goes in the sandbox (the sandbox's own, not the agent's to read back). */
const SERVICE_LOG = "/tmp/.denv-service.log";

/** Prime's labels are strings: denv's key=value labels, one each. */
export function primeLabels(labels: Record<string, string>): string[] {
  return Object.entries(labels).map(([k, v]) => `${k}=${v}`);
}

/**
 * A sandbox for an environment, from an image (a deploy) or a checkpoint (a fork): created with
 * the environment's labels and, unless the file is a service project's that allows egress, an
 * empty egress allowlist. Then, before any command of the agent's: the agent's user resolved
 * through the sandbox's /etc/passwd (read by Prime's file API, denvd's own read, never by a
 * binary of the image) and root refused, so is a sudo or su without a password, and so is a
 * system directory the agent could write (root runs programs from there to grade; protection 1
 * and 2); the service's command started as its compose user and its healthcheck waited for; the
 * egress probe run from inside as the agent, against the policy Prime reports (protection 5). A
 * failure deletes what it created.
 */
export async function createEnvironment(
  host: PrimeHost,
  base: EnvironmentBase,
  from: SandboxSource,
  version: PrimeVersionRecord | undefined,
  phase: PhaseListener,
): Promise<{ rec: PrimeEnvironmentRecord }> {
  const { plan, command } = base;
  const service = plan.services[0];
  if (!service) throw new DenvError("invalid_request", `project ${plan.name} has no service`);
  const networkAccess = plan.egress === "allow";
  const started = Date.now();
  phase.start("place");
  phase.end("place", { host: host.hostId }, version ? "restore" : "start");
  host.inFlight.add(command);
  let sandboxId: string | undefined;
  try {
    const made = await provider(() =>
      host.api.createSandbox({
        name: `denv-${base.project}-${base.name}`
          .toLowerCase()
          .replace(/[^a-z0-9-]/g, "-")
          .slice(0, 63),
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
        timeoutMinutes: host.timeoutMinutes ?? MAX_TIMEOUT_MINUTES,
        idempotencyKey: command,
      }),
    );
    sandboxId = made.id;
    const id = made.id;
    await provider(() => host.api.waitRunning(id));
    const created = Date.now();
    if (version) phase.end("restore", { version: version.id, method: "prime-checkpoint" }, "start");
    const passwd = (await provider(() => host.api.downloadFile(id, "/etc/passwd"))).toString("utf8");
    const agent = lookupUser(passwd, plan.agent.user, PROVIDER);
    const asAgent = runAs(host, id, agent.name);
    if (plan.kind === "rl-environment") {
      if (agent.uid === 0) throw new DenvError("agent_root", Protection.agentRoot(service.name));
      await refuseEscalation(asAgent, agent, service.name);
      await refuseWritableSystem(asAgent, agent, service.name);
    }
    // A verifier that reaches the services grades in this sandbox: its uid is not the agent's to
    // act as. One whose user the sandbox lacks cannot run here (its verify says so).
    const sharing =
      plan.kind === "rl-environment" && plan.verifier?.services !== false ? plan.verifier : undefined;
    const verifierUid = sharing ? uidOf(passwd, sharing.user) : undefined;
    await startService(host, id, service);
    phase.end("start", { containers: { [service.name]: id } });
    const healthStart = Date.now();
    await waitHealthy(host, id, service);
    // What runs now is the service's and Prime's: whatever is not, later, is the agent's.
    const baseline = await provider(() => listBaseline(asRoot(host, id)));
    const probeStart = Date.now();
    let probe: EgressProbe | { skipped: string };
    if (networkAccess) probe = { skipped: "egress is allowed (a service project)" };
    else {
      phase.start("probe");
      probe = await probeEgress(host, id, agent, service.name);
      if (!probe.ok) {
        throw new DenvError("egress_leak", Protection.egressLeak(base.id, probe.findings[0] ?? "unknown"));
      }
      phase.end("probe", probe);
    }
    const done = Date.now();
    const { testsTar, ...named } = base;
    const rec: PrimeEnvironmentRecord = {
      ...named,
      ...(testsTar ? { testsTar } : {}),
      sandboxId: id,
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
    if (sandboxId) {
      const id = sandboxId;
      await host.api
        .deleteSandbox(id)
        .catch((e: unknown) => host.log(`${base.id}: could not delete ${id}: ${String(e)}`));
    }
    throw err;
  } finally {
    host.inFlight.delete(command);
  }
}

/** A shell script in the sandbox as `user`, from /: its stdout, whatever its exit. */
export function runAs(host: PrimeHost, sandboxId: string, user: string): (script: string) => Promise<string> {
  return async (script) =>
    (
      await provider(() => host.api.runCommand(sandboxId, ["/bin/sh", "-c", script], { user, cwd: "/" }))
    ).stdout.toString("utf8");
}

/**
 * A script run as root inside the sandbox with SYSTEM_PATH (none of it the agent's to write): its
 * stdout; a failure is a `docker` error with its stderr.
 */
export function asRoot(host: PrimeHost, sandboxId: string): AsRoot {
  return async (script, env) => {
    const r = await provider(() =>
      host.api.runCommand(sandboxId, ["/bin/sh", "-c", `export PATH=${SYSTEM_PATH}; ${script}`], {
        user: "root",
        cwd: "/",
        ...(env ? { env } : {}),
      }),
    );
    if (r.exitCode !== 0)
      throw new DenvError("docker", `${PROVIDER}: ${r.stderr.toString().trim() || `exit ${r.exitCode}`}`);
    return r.stdout.toString("utf8");
  };
}

/**
 * The service's command (compose `command`), started in the background as the service's compose
 * user (the image's when it has none, as the engine would), in its working_dir, detached from the
 * command session that started it; a service without one runs nothing of its own.
 */
async function startService(
  host: PrimeHost,
  sandboxId: string,
  service: Plan["services"][number],
): Promise<void> {
  const start = startCommands(service);
  if (!start) return;
  const r = await provider(() =>
    host.api.runCommand(
      sandboxId,
      ["/bin/sh", "-c", `nohup /bin/sh -c "$1" >${SERVICE_LOG} 2>&1 </dev/null &`, "sh", start.startCmd],
      {
        ...(service.user !== undefined ? { user: service.user } : {}),
        cwd: service.workingDir ?? "/",
      },
    ),
  );
  if (r.exitCode !== 0) {
    throw new DenvError(
      "docker",
      `service '${service.name}' could not start: ${r.stderr.toString().trim() || `exit ${r.exitCode}`}`,
    );
  }
}

/** Runs the service's healthcheck until it passes (service-health.ts), as the service's compose user. */
function waitHealthy(host: PrimeHost, sandboxId: string, service: Plan["services"][number]): Promise<void> {
  return waitHealthyWith(service, async (script) => {
    const r = await provider(() =>
      host.api.runCommand(sandboxId, ["/bin/sh", "-c", script], {
        ...(service.user !== undefined ? { user: service.user } : {}),
        cwd: service.workingDir ?? "/",
      }),
    );
    return { exitCode: r.exitCode, output: r.stdout.toString() + r.stderr.toString() };
  });
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
