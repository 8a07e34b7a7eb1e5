import {
  DenvError,
  isRootUser,
  numericId,
  type Plan,
  Protection,
  ProviderMessages,
  parseUser,
} from "@denv/spec";
import { PROVIDER } from "./check-plan.js";
import type { E2bSandbox } from "./e2b-sdk.js";

/** Who an E2B call runs as: the name E2B takes, and the uid it is in the sandbox. */
export interface SandboxUser {
  name: string;
  uid: number;
}

/** The sandbox's /etc/passwd, read by envd as root (denvd's own read, never as the agent). */
export function readPasswd(sbx: E2bSandbox): Promise<string> {
  return sbx.files.read("/etc/passwd", { user: "root" });
}

/**
 * Resolves a `user` spelling in the sandbox as the engine would in a container: numbers in any
 * spelling, names through the sandbox's /etc/passwd (read by denvd's own means, never as the
 * agent). E2B and Prime run a call as a named user with that user's own groups, so a uid without
 * a passwd entry is refused, and so is a group.
 *
 * @throws DenvError `invalid_request` for a group, or a user the passwd lacks.
 */
export function lookupUser(passwd: string, user: string, provider = PROVIDER): SandboxUser {
  const spec = parseUser(user);
  if (spec.group !== undefined && spec.group !== "") {
    throw new DenvError(
      "invalid_request",
      ProviderMessages.unsupportedOption(
        provider,
        `a group in user '${user}'`,
        `${provider} runs a call as a user with that user's own groups`,
      ),
    );
  }
  for (const line of passwd.split("\n")) {
    const [name, , uidText] = line.split(":");
    const uid = numericId(uidText ?? "");
    if (name === undefined || uid === undefined) continue;
    if (spec.uid !== undefined ? uid === spec.uid : name === spec.user) return { name, uid };
  }
  throw new DenvError("invalid_request", ProviderMessages.userWithoutName(provider, user));
}

/**
 * The program that drops root to a user where a provider's call takes no user (Modal) or must
 * drop capabilities too (Prime's services): util-linux's, by its system path. Root runs it, so
 * it must be one the agent cannot replace: a sandbox in which the agent's user can write
 * /usr/bin is refused (ProviderMessages.agentWritesSystem).
 */
export const SETPRIV = "/usr/bin/setpriv";

/** A user resolved through a sandbox's passwd, with what setpriv and a login need. */
export interface PasswdUser extends SandboxUser {
  gid: number;
  home: string;
}

/** lookupUser, and the user's primary group and home from the same passwd line. */
export function passwdUser(passwd: string, user: string, provider = PROVIDER): PasswdUser {
  const { name, uid } = lookupUser(passwd, user, provider);
  const fields =
    passwd
      .split("\n")
      .find((l) => l.split(":")[0] === name)
      ?.split(":") ?? [];
  return { name, uid, gid: Number(fields[3] ?? uid), home: fields[5] || "/" };
}

/**
 * Protection 1 as denvd's Docker runtime applies it (principalFor): on the agent service of an
 * rl-environment, root is refused, decided on the uid the user resolves to, never on a spelling.
 * Protection 2 where the verifier grades in the agent's own sandbox (it reaches the services): the
 * verifier's uid is refused too, or the agent could leave, as that uid, what the verifier's login
 * shell runs (its ~/.profile) or imports (its user site-packages) before it grades.
 *
 * @throws DenvError `agent_root` with Protection.agentRoot; `forbidden` with
 *   ProviderMessages.agentAsVerifier.
 */
export async function agentPrincipal(
  sbx: E2bSandbox,
  plan: Plan,
  ask: { service?: string | undefined; user?: string | undefined },
  agent: SandboxUser,
  verifierUid?: number,
): Promise<SandboxUser> {
  return principalFor(() => readPasswd(sbx), plan, ask, agent, verifierUid);
}

/**
 * agentPrincipal for any provider that runs a call as a named user: `passwd` reads the sandbox's
 * /etc/passwd by denvd's own means (asked only when a user is named).
 */
export async function principalFor(
  passwd: () => Promise<string>,
  plan: Plan,
  ask: { service?: string | undefined; user?: string | undefined },
  agent: SandboxUser,
  verifierUid: number | undefined,
  provider = PROVIDER,
): Promise<SandboxUser> {
  const service = ask.service ?? plan.agent.service;
  if (service !== plan.agent.service) {
    throw new DenvError(
      "not_found",
      `environment of project ${plan.name} has no service '${service}' (services: ${plan.agent.service})`,
    );
  }
  const user =
    ask.user === undefined
      ? agent
      : isRootUser(ask.user)
        ? { name: "root", uid: 0 }
        : lookupUser(await passwd(), ask.user, provider);
  if (user.uid === 0 && plan.kind === "rl-environment") {
    throw new DenvError("agent_root", Protection.agentRoot(service));
  }
  if (user.uid === verifierUid) {
    throw new DenvError(
      "forbidden",
      ProviderMessages.agentAsVerifier(service, ask.user ?? user.name, user.uid),
    );
  }
  return user;
}

/** How a user may become root without a password (no quote in a name), asked as the user: `id -u` prints 0. */
const ROOT_ROUTES: ReadonlyArray<[string, string]> = [
  ["sudo -n", "command -v sudo >/dev/null 2>&1 && sudo -n id -u </dev/null 2>/dev/null"],
  ["su with an empty root password", "su -c 'id -u' root </dev/null 2>/dev/null"],
];

/**
 * Protection 1 when the sandbox is made: the agent's user resolves to a uid other than 0, and
 * cannot become root without a password through sudo or su. E2B gives its sandboxes no
 * no-new-privileges, so a sudo rule or an empty root password in the image would hand the agent
 * root; each is tried as the agent, before any command of the agent's has run.
 *
 * @throws DenvError `agent_root` with Protection.agentRoot or ProviderMessages.agentBecomesRoot.
 */
export async function refuseRootAgent(sbx: E2bSandbox, agent: SandboxUser, service: string): Promise<void> {
  return refuseEscalation(runAs(sbx, agent), agent, service);
}

/** A shell script in the sandbox as `user` (from /, no timeout): its stdout. */
export function runAs(sbx: E2bSandbox, user: SandboxUser): (script: string) => Promise<string> {
  return async (script) =>
    (await sbx.commands.run(script, { user: user.name, cwd: "/", timeoutMs: 0 })).stdout;
}

/**
 * refuseRootAgent for any provider: `run` runs a shell script in the sandbox as the agent and
 * gives its stdout.
 */
export async function refuseEscalation(
  run: (script: string) => Promise<string>,
  agent: SandboxUser,
  service: string,
): Promise<void> {
  if (agent.uid === 0) throw new DenvError("agent_root", Protection.agentRoot(service));
  const script = ROOT_ROUTES.map(([how, cmd]) => `[ "$(${cmd})" = 0 ] && echo '${how}'`).join("; ");
  const how = (await run(`${script}; true`)).trim().split("\n")[0];
  if (how) throw new DenvError("agent_root", ProviderMessages.agentBecomesRoot(service, agent.name, how));
}

/**
 * Where root takes its programs and libraries from: the directories of SYSTEM_PATH, the libraries'
 * and /etc (the loader's preload list, the shells' profiles). A bridge's root scripts run with
 * SYSTEM_PATH; /usr/local is left out of both, as images give it to their users.
 */
const SYSTEM_DIRS = [
  "/",
  "/bin",
  "/sbin",
  "/usr",
  "/usr/bin",
  "/usr/sbin",
  "/lib",
  "/lib64",
  "/usr/lib",
  "/usr/lib64",
  "/etc",
  "/etc/ld.so.preload",
];

/** The PATH a bridge's root scripts run with in a sandbox: none of it the agent's to write. */
export const SYSTEM_PATH = "/usr/sbin:/usr/bin:/sbin:/bin";

/**
 * Protection 2 where the verifier is prepared in the agent's filesystem (a single-sandbox
 * provider's fork): root runs programs from there, so none of the places it takes them from may
 * be writable by the agent's user. Asked as the agent, before any command of the agent's; `run`
 * runs a shell script in the sandbox as the agent and gives its stdout.
 *
 * @throws DenvError `forbidden` with ProviderMessages.agentWritesSystem naming the first such path.
 */
export async function refuseWritableSystem(
  run: (script: string) => Promise<string>,
  agent: SandboxUser,
  service: string,
): Promise<void> {
  const script = `for p in ${SYSTEM_DIRS.join(" ")}; do [ -e "$p" ] && [ -w "$p" ] && echo "$p"; done; true`;
  const path = (await run(script)).trim().split("\n")[0];
  if (path) throw new DenvError("forbidden", ProviderMessages.agentWritesSystem(service, agent.name, path));
}
