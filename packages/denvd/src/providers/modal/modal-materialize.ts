import { DenvError, type EgressProbe, labelsFor, type Plan, Protection, ProviderMessages } from "@denv/spec";
import type { App, ModalClient, Sandbox } from "modal";
import type { PhaseListener } from "../../runtime/phase-listener.js";
import { startCommands } from "../e2b/build-template.js";
import { type EgressCanary, probeFromInside } from "../e2b/egress-probe.js";
import { refuseEscalation, refuseWritableSystem, SYSTEM_PATH } from "../e2b/sandbox-user.js";
import { type AsRoot, listBaseline } from "../sandbox-procs.js";
import { waitHealthyWith } from "../service-health.js";
import { PROVIDER } from "./modal-dockerfile.js";
import { execInModal, type ModalUser, modalUser } from "./modal-exec.js";

/** What the Modal runtime's parts share: who the host is, its client and app at Modal. */
export interface ModalHost {
  readonly hostId: string;
  readonly client: ModalClient;
  /** The app every sandbox of this host is created in. */
  readonly app: App;
  /** Listeners the egress probe connects to from inside each sandbox (protection 5). */
  readonly canaries: readonly EgressCanary[];
  /** Each sandbox's lifetime (default MAX_TIMEOUT_MS): Modal ends it then. */
  readonly timeoutMs?: number;
  log(line: string): void;
}

/** The longest life Modal gives a sandbox (24 hours); denv asks for all of it. */
export const MAX_TIMEOUT_MS = 24 * 3600_000;

/** What an environment is before it has a sandbox. */
export interface EnvironmentBase {
  id: string;
  project: string;
  name: string;
  plan: Plan;
  command: string;
  /** The image the sandbox starts from: a built one (a deploy) or a version's snapshot (a fork). */
  imageId: string;
  /** The user the image's Dockerfile named last (the service's when compose names none). */
  imageUser?: string | undefined;
}

/** How long each step of making a sandbox took. */
export interface SandboxTimings {
  create_ms: number;
  start_ms: number;
  health_ms: number;
  probe_ms: number;
  total_ms: number;
}

/** An environment's sandbox, ready for the agent. */
export interface ModalEnvironment {
  sandbox: Sandbox;
  agent: ModalUser;
  /** The verifier's uid where it grades in this sandbox: not the agent's to act as. */
  verifierUid?: number;
  /** The processes running when the sandbox became ready (none of them the agent's). */
  baseline: string[];
  probe: EgressProbe | { skipped: string };
  timings: SandboxTimings;
}

/** Where the service's output goes in the sandbox. */
const SERVICE_LOG = "/tmp/.denv-service.log";

/**
 * A sandbox for an environment from an image (a deploy's build, or a fork's version): created in
 * the host's app with the environment's labels as Modal tags and, unless the file is a service
 * project's that allows egress, `blockNetwork`. Then, before any command of the agent's: the
 * agent's user resolved through the sandbox's /etc/passwd (read by Modal's own file tool, never
 * by a program of the image) and root refused on its uid, so is a sudo or su without a password,
 * and so is a system directory the agent could write (root starts setpriv and the verifier's
 * preparation from there; protections 1 and 2); the service's command started as its compose
 * user (the Dockerfile's USER when it names none) and its healthcheck waited for; the processes
 * then running recorded; the egress probe run from inside as the agent (protection 5). Whatever
 * fails terminates the sandbox.
 */
export async function createEnvironment(
  host: ModalHost,
  base: EnvironmentBase,
  restoring: string | undefined,
  phase: PhaseListener,
): Promise<ModalEnvironment> {
  const { plan } = base;
  const service = plan.services[0];
  if (!service) throw new DenvError("invalid_request", `project ${plan.name} has no service`);
  const networkAccess = plan.egress === "allow";
  const started = Date.now();
  phase.start("place");
  phase.end("place", { host: host.hostId }, restoring ? "restore" : "start");
  const tags = labelsFor({
    host: host.hostId,
    project: base.project,
    environment: base.id,
    role: "service",
    command: base.command,
    service: service.name,
  });
  const sb = await host.client.sandboxes.create(host.app, await host.client.images.fromId(base.imageId), {
    tags,
    blockNetwork: !networkAccess,
    env: service.environment,
    // The service's caps as Modal's hard limits (and reservations: Modal schedules on them).
    cpu: service.resources.cpus,
    cpuLimit: service.resources.cpus,
    memoryMiB: Math.ceil(service.resources.memoryBytes / 2 ** 20),
    memoryLimitMiB: Math.ceil(service.resources.memoryBytes / 2 ** 20),
    timeoutMs: host.timeoutMs ?? MAX_TIMEOUT_MS,
  });
  try {
    const created = Date.now();
    if (restoring) phase.end("restore", { version: restoring, method: "modal-filesystem-snapshot" }, "start");
    const passwd = await sb.filesystem.readText("/etc/passwd");
    const agent = modalUser(passwd, plan.agent.user);
    const asAgent = runAs(sb, agent);
    if (plan.kind === "rl-environment") {
      if (agent.uid === 0) throw new DenvError("agent_root", Protection.agentRoot(service.name));
      await refuseEscalation(asAgent, agent, service.name);
      await refuseWritableSystem(asAgent, agent, service.name);
    }
    const sharing =
      plan.kind === "rl-environment" && plan.verifier?.services !== false ? plan.verifier : undefined;
    const verifierUid = sharing ? uidOf(passwd, sharing.user) : undefined;
    const serviceUser = modalUser(passwd, service.user ?? base.imageUser ?? "0");
    await startService(sb, serviceUser, service);
    phase.end("start", { containers: { [service.name]: sb.sandboxId } });
    const healthStart = Date.now();
    await waitHealthyWith(service, async (script) => {
      const r = await execInModal(sb, serviceUser, service.workingDir ?? "/", {
        cmd: ["/bin/sh", "-c", script],
      });
      return { exitCode: r.exitCode, output: r.stdout.toString() + r.stderr.toString() };
    });
    // What runs now is the service's and Modal's: whatever is not, later, is the agent's.
    const baseline = await listBaseline(asRoot(sb));
    const probeStart = Date.now();
    let probe: EgressProbe | { skipped: string };
    if (networkAccess) probe = { skipped: "egress is allowed (a service project)" };
    else {
      phase.start("probe");
      probe = await probeSandbox(host, sb, asAgent, service.name, false);
      if (!probe.ok)
        throw new DenvError("egress_leak", Protection.egressLeak(base.id, probe.findings[0] ?? "unknown"));
      phase.end("probe", probe);
    }
    const done = Date.now();
    return {
      sandbox: sb,
      agent,
      ...(verifierUid !== undefined ? { verifierUid } : {}),
      baseline,
      probe,
      timings: {
        create_ms: created - started,
        start_ms: healthStart - created,
        health_ms: probeStart - healthStart,
        probe_ms: done - probeStart,
        total_ms: done - started,
      },
    };
  } catch (err) {
    await sb
      .terminate()
      .catch((e: unknown) => host.log(`${base.id}: could not terminate ${sb.sandboxId}: ${String(e)}`));
    throw err;
  }
}

/**
 * A shell script in the sandbox as `user`, from /: its stdout. The scripts run through it (the
 * root checks, the egress probe) end with a command that succeeds, so a failed exit means the
 * script never ran as the user (no setpriv at /usr/bin/setpriv, a user setpriv cannot become):
 * that fails the call, where an empty answer would pass the checks.
 *
 * @throws DenvError `docker` naming the user, the exit code and the first line of stderr.
 */
export function runAs(sb: Sandbox, user: ModalUser): (script: string) => Promise<string> {
  return async (script) => {
    const r = await execInModal(sb, user, "/", { cmd: ["/bin/sh", "-c", script] });
    if (r.exitCode !== 0) {
      const why = r.stderr.toString().trim().split("\n")[0] || "no output";
      throw new DenvError(
        "docker",
        `${PROVIDER}: a check as user '${user.name}' exited ${r.exitCode}: ${why}`,
      );
    }
    return r.stdout.toString("utf8");
  };
}

/**
 * A script run as the sandbox's own user (root: modal-images.ts ends a Dockerfile that switched
 * USER with `USER 0`) with SYSTEM_PATH, none of it the agent's to write: its stdout; a failure is
 * a `docker` error with its stderr.
 */
export function asRoot(sb: Sandbox): AsRoot {
  return async (script, env) => {
    const p = await sb.exec(["/bin/sh", "-c", `export PATH=${SYSTEM_PATH}; ${script}`], {
      workdir: "/",
      ...(env ? { env } : {}),
    });
    const [out, err, code] = await Promise.all([p.stdout.readText(), p.stderr.readText(), p.wait()]);
    if (code !== 0) throw new DenvError("docker", `${PROVIDER}: ${err.trim() || `exit ${code}`}`);
    return out;
  };
}

/**
 * The service's command (compose `command`), started in the background as `user`, in its
 * working_dir, detached from the exec that started it; a service without one runs nothing of its own.
 */
async function startService(sb: Sandbox, user: ModalUser, service: Plan["services"][number]): Promise<void> {
  const start = startCommands(service);
  if (!start) return;
  const r = await execInModal(sb, user, service.workingDir ?? "/", {
    cmd: ["/bin/sh", "-c", `nohup /bin/sh -c "$1" >${SERVICE_LOG} 2>&1 </dev/null &`, "sh", start.startCmd],
  });
  if (r.exitCode !== 0) {
    throw new DenvError(
      "docker",
      `service '${service.name}' could not start: ${r.stderr.toString().trim() || `exit ${r.exitCode}`}`,
    );
  }
}

/** The uid `user` has in the passwd, or undefined when it has none there. */
function uidOf(passwd: string, user: string): number | undefined {
  try {
    return modalUser(passwd, user).uid;
  } catch {
    return undefined;
  }
}

/**
 * The egress probe from inside a sandbox, as the agent (`asAgent`), against the host's canaries
 * (protection 5). Modal reports no network policy of a running sandbox: the policy is what was
 * asked at create (`networkAccess`), which the probe tests.
 */
export async function probeSandbox(
  host: ModalHost,
  sb: Sandbox,
  asAgent: (script: string) => Promise<string>,
  service: string,
  networkAccess: boolean,
): Promise<EgressProbe> {
  if (host.canaries.length === 0) throw new DenvError("conflict", ProviderMessages.noCanary(PROVIDER));
  return probeFromInside(
    asAgent,
    {
      sandboxId: sb.sandboxId,
      internetAllowed: networkAccess,
      policy: `modal blockNetwork (asked at create: ${!networkAccess})`,
    },
    service,
    host.canaries,
  );
}
