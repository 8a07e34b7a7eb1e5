import { DenvError, isRootUser, type Plan, Protection, ProviderMessages } from "@denv/spec";
import { PROVIDER, provider } from "./daytona-host.js";
import type { DaytonaEnvironmentRecord } from "./daytona-records.js";
import type { DaytonaSandbox } from "./daytona-sdk.js";

/**
 * The one principal a Daytona sandbox has: the agent's. A call that asks for another service
 * or another user is refused; root by name or uid is refused as on every runtime.
 */
export async function checkPrincipal(
  rec: DaytonaEnvironmentRecord,
  sbx: DaytonaSandbox,
  ask: { service?: string | undefined; user?: string | undefined },
): Promise<void> {
  const service = ask.service ?? rec.plan.agent.service;
  if (service !== rec.plan.agent.service) {
    throw new DenvError(
      "not_found",
      `environment of project ${rec.plan.name} has no service '${service}' (services: ${rec.plan.agent.service})`,
    );
  }
  if (ask.user === undefined || ask.user === rec.agentUser) return;
  const uid = isRootUser(ask.user) ? 0 : await uidIn(sbx, ask.user);
  if (uid === 0 && rec.plan.kind === "rl-environment") {
    throw new DenvError("agent_root", Protection.agentRoot(service));
  }
  if (uid !== rec.agentUid) {
    throw new DenvError(
      "invalid_request",
      ProviderMessages.unsupportedOption(
        PROVIDER,
        `user '${ask.user}'`,
        `a Daytona sandbox runs every call as its one OS user, here uid ${rec.agentUid} (${rec.agentUser})`,
      ),
    );
  }
}

/** The uid `user` (a number, or a name in the sandbox's /etc/passwd) has in the sandbox. */
async function uidIn(sbx: DaytonaSandbox, user: string): Promise<number | undefined> {
  if (/^\d+$/.test(user)) return Number(user);
  const passwd = (await provider(() => sbx.fs.downloadFile("/etc/passwd"))).toString("utf8");
  const line = passwd.split("\n").find((l) => l.split(":")[0] === user);
  return line === undefined ? undefined : Number(line.split(":")[2]);
}

/**
 * The verifier grades in a sandbox from the version's snapshot (daytona-verify.ts): its image is
 * the agent service's, whatever `services` says.
 */
export function checkVerifierImage(plan: Plan): void {
  const v = plan.verifier;
  const s = plan.services[0];
  if (!v || !s) return;
  const same =
    (v.build !== undefined && s.build !== undefined && JSON.stringify(v.build) === JSON.stringify(s.build)) ||
    (v.build === undefined && s.build === undefined && v.image === s.image);
  if (!same) {
    throw new DenvError(
      "invalid_request",
      ProviderMessages.lacks(
        PROVIDER,
        "a verifier image of its own",
        `x-denv.verifier with an image other than service '${s.name}''s needs (the verifier grades in a sandbox from the episode's snapshot: build it as the service is built)`,
      ),
    );
  }
}
