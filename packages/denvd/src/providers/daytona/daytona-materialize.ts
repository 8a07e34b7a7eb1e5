import { DenvError, type EgressProbe, labelsFor, type Plan, Protection, ProviderMessages } from "@denv/spec";
import type { PhaseListener } from "../../runtime/phase-listener.js";
import { startCommands } from "../e2b/build-template.js";
import { probeFromInside } from "../e2b/egress-probe.js";
import { shellQuote } from "../e2b/sandbox-exec.js";
import { refuseEscalation, refuseWritableSystem } from "../e2b/sandbox-user.js";
import { waitHealthyWith } from "../service-health.js";
import { runScript } from "./daytona-exec.js";
import { type DaytonaHost, PROVIDER, provider } from "./daytona-host.js";
import type { DaytonaEnvironmentRecord, DaytonaVersionRecord } from "./daytona-records.js";
import type { DaytonaSandbox } from "./daytona-sdk.js";

/** What an environment is before it has a sandbox. */
export interface EnvironmentBase {
  id: string;
  project: string;
  name: string;
  plan: Plan;
  command: string;
  /** The built snapshot's name (a deploy) or the version id (a fork). */
  image: string;
  testsTar: string | undefined;
}

/** The session the service's command runs in, for the sandbox's life. */
const SERVICE_SESSION = "denv-service";

/**
 * A sandbox for an environment, from a Daytona snapshot (the built one, or a version's): created
 * with the environment's labels, the agent's user as its one OS user and, unless the file is a
 * service project's that allows egress, `networkBlockAll`. Then, before any command of the
 * agent's: the uid Daytona runs that user as is read from the kernel (`/proc/self/status` through
 * Daytona's files API, not a binary of the image) and root refused, so is a sudo or su without a
 * password (protection 1); the service's command started and its healthcheck waited for; the
 * egress probe run from inside (protection 5). A failure deletes what it created.
 */
export async function createEnvironment(
  host: DaytonaHost,
  base: EnvironmentBase,
  snapshot: string,
  version: DaytonaVersionRecord | undefined,
  phase: PhaseListener,
): Promise<{ rec: DaytonaEnvironmentRecord; sbx: DaytonaSandbox }> {
  const { plan, command } = base;
  const service = plan.services[0];
  if (!service) throw new DenvError("invalid_request", `project ${plan.name} has no service`);
  const networkBlockAll = plan.egress !== "allow";
  const started = Date.now();
  phase.start("place");
  phase.end("place", { host: host.hostId }, version ? "restore" : "start");
  host.inFlight.add(command);
  let sbx: DaytonaSandbox | undefined;
  try {
    sbx = await provider(() =>
      host.client.create(
        {
          snapshot,
          user: plan.agent.user,
          envVars: service.environment,
          labels: labelsFor({
            host: host.hostId,
            project: base.project,
            environment: base.id,
            role: "service",
            command,
            service: service.name,
          }),
          networkBlockAll,
          // denv decides when a sandbox stops or goes: never Daytona's idle timers.
          autoStopInterval: 0,
          autoArchiveInterval: 0,
          autoDeleteInterval: -1,
        },
        { timeout: 0 },
      ),
    );
    const made = sbx;
    const created = Date.now();
    if (version) phase.end("restore", { version: version.id, method: "daytona-snapshot" }, "start");
    const agentUid = await provider(() => ownUid(made));
    if (plan.kind === "rl-environment") {
      if (agentUid === 0) throw new DenvError("agent_root", Protection.agentRoot(service.name));
      const run = async (script: string) => (await runScript(made, script)).output;
      await refuseEscalation(run, { name: plan.agent.user, uid: agentUid }, service.name);
      await refuseWritableSystem(run, { name: plan.agent.user, uid: agentUid }, service.name);
    }
    await startService(made, service);
    phase.end("start", { containers: { [service.name]: made.id } });
    const healthStart = Date.now();
    await waitHealthy(made, service);
    const probeStart = Date.now();
    let probe: EgressProbe | { skipped: string };
    if (!networkBlockAll) probe = { skipped: "egress is allowed (a service project)" };
    else {
      phase.start("probe");
      probe = await probeEgress(host, made, service.name);
      if (!probe.ok) {
        throw new DenvError("egress_leak", Protection.egressLeak(base.id, probe.findings[0] ?? "unknown"));
      }
      phase.end("probe", probe);
    }
    const done = Date.now();
    const { testsTar, ...named } = base;
    const rec: DaytonaEnvironmentRecord = {
      ...named,
      ...(testsTar ? { testsTar } : {}),
      sandboxId: made.id,
      snapshot,
      agent: plan.agent,
      agentUser: plan.agent.user,
      agentUid,
      networkBlockAll,
      ...(version ? { parentVersion: version.id } : {}),
      timings: {
        create_ms: created - started,
        start_ms: healthStart - created,
        health_ms: probeStart - healthStart,
        probe_ms: done - probeStart,
        total_ms: done - started,
      },
      probe,
      createdAt: new Date(started).toISOString(),
    };
    await host.records.putEnvironment(rec);
    return { rec, sbx: made };
  } catch (err) {
    if (sbx) {
      const id = sbx.id;
      await sbx.delete().catch((e: unknown) => host.log(`${base.id}: could not delete ${id}: ${String(e)}`));
    }
    throw err;
  } finally {
    host.inFlight.delete(command);
  }
}

/**
 * The uid Daytona runs the sandbox's commands and file calls as: the kernel's answer for the
 * process that reads `/proc/self/status` through the files API.
 */
export async function ownUid(sbx: DaytonaSandbox): Promise<number> {
  const status = (await sbx.fs.downloadFile("/proc/self/status")).toString("utf8");
  const uid = Number(/^Uid:\s+(\d+)/m.exec(status)?.[1]);
  if (!Number.isInteger(uid)) throw new DenvError("docker", `${PROVIDER}: no Uid line in /proc/self/status`);
  return uid;
}

/**
 * The service's command (compose `command`), started in a session of the sandbox's own that
 * outlives the call, as the sandbox's user; a service without one runs nothing of its own.
 */
export async function startService(
  sbx: DaytonaSandbox,
  service: Plan["services"][number],
  as: readonly string[] = [],
): Promise<void> {
  const start = startCommands(service);
  if (!start) return;
  await provider(async () => {
    await sbx.process.createSession(SERVICE_SESSION);
    await sbx.process.executeSessionCommand(SERVICE_SESSION, {
      command: asUser(as, start.startCmd),
      runAsync: true,
    });
  });
}

/** A script for a shell, run through `as` (setpriv's argv) when it is not empty. */
export function asUser(as: readonly string[], script: string): string {
  return as.length === 0 ? script : `${as.map(shellQuote).join(" ")} sh -c ${shellQuote(script)}`;
}

/** Runs the service's healthcheck until it passes (service-health.ts), as the sandbox's user or `as`. */
export function waitHealthy(
  sbx: DaytonaSandbox,
  service: Plan["services"][number],
  as: readonly string[] = [],
): Promise<void> {
  return waitHealthyWith(service, (script) => provider(() => runScript(sbx, asUser(as, script))));
}

/** The egress probe from inside the sandbox, as the agent, against the host's canaries (protection 5). */
export async function probeEgress(
  host: DaytonaHost,
  sbx: DaytonaSandbox,
  service: string,
  as: readonly string[] = [],
): Promise<EgressProbe> {
  if (host.canaries.length === 0) throw new DenvError("conflict", ProviderMessages.noCanary(PROVIDER));
  await provider(() => sbx.refreshData());
  const blocked = sbx.networkBlockAll === true;
  return provider(() =>
    probeFromInside(
      async (script) => (await runScript(sbx, asUser(as, script))).output,
      {
        sandboxId: sbx.id,
        internetAllowed: !blocked,
        policy: `daytona network (networkBlockAll: ${blocked})`,
      },
      service,
      host.canaries,
    ),
  );
}
