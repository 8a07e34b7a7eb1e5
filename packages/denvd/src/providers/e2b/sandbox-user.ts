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

/**
 * Resolves a `user` spelling in the sandbox as the engine would in a container: numbers in any
 * spelling, names through the sandbox's /etc/passwd (read by envd as root, denvd's own read, never
 * as the agent). E2B runs commands and file calls as a named user, so a uid without a passwd entry
 * is refused, and so is a group (E2B gives a user its own groups).
 *
 * @throws DenvError `invalid_request` for a group, or a user the passwd lacks.
 */
export async function resolveSandboxUser(sbx: E2bSandbox, user: string): Promise<SandboxUser> {
  const spec = parseUser(user);
  if (spec.group !== undefined && spec.group !== "") {
    throw new DenvError(
      "invalid_request",
      ProviderMessages.unsupportedOption(
        PROVIDER,
        `a group in user '${user}'`,
        "E2B runs a call as a user with that user's own groups",
      ),
    );
  }
  const passwd = await sbx.files.read("/etc/passwd", { user: "root" });
  for (const line of passwd.split("\n")) {
    const [name, , uidText] = line.split(":");
    const uid = numericId(uidText ?? "");
    if (name === undefined || uid === undefined) continue;
    if (spec.uid !== undefined ? uid === spec.uid : name === spec.user) return { name, uid };
  }
  throw new DenvError("invalid_request", ProviderMessages.userWithoutName(PROVIDER, user));
}

/**
 * Protection 1 as denvd's Docker runtime applies it (principalFor): on the agent service of an
 * rl-environment, root is refused, decided on the uid the user resolves to, never on a spelling.
 *
 * @throws DenvError `agent_root` with Protection.agentRoot.
 */
export async function agentPrincipal(
  sbx: E2bSandbox,
  plan: Plan,
  ask: { service?: string | undefined; user?: string | undefined },
  agent: SandboxUser,
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
        : await resolveSandboxUser(sbx, ask.user);
  if (user.uid === 0 && plan.kind === "rl-environment") {
    throw new DenvError("agent_root", Protection.agentRoot(service));
  }
  return user;
}
