import { DenvError, type Plan, ProviderMessages, type ServicePlan, type VerifierPlan } from "@denv/spec";

export const PROVIDER = "E2B";

/** denv's own resolver options, which a plan carries unless its file gives others (or none). */
const DEFAULT_DNS_OPT = ["timeout:1", "attempts:1"];

/**
 * Refuses, before anything is created, what an E2B sandbox cannot be: one line naming the
 * capability or the compose key. An E2B sandbox is one machine from one template; what a file
 * asks of several services, of volumes, of the engine's container options or of denv's own
 * sandboxes is refused rather than dropped. The service's `command` becomes the template's start
 * command and its healthcheck that command's ready check (E2B runs both once at build time and
 * snapshots the running sandbox); the verifier runs in the fork's sandbox, or in one of its own
 * when it reads only files (checkVerifier).
 *
 * @throws DenvError `invalid_request` (a capability E2B lacks) or `invalid_compose` (a key this
 *   runtime does not carry over).
 */
export function checkPlan(plan: Plan, provider: string = PROVIDER): ServicePlan {
  const [service, ...others] = plan.services;
  if (!service || others.length > 0) {
    throw new DenvError(
      "invalid_request",
      ProviderMessages.lacks(provider, "multi_service", `a file of ${plan.services.length} services needs`),
    );
  }
  if (plan.volumes.length > 0) {
    throw new DenvError(
      "invalid_request",
      ProviderMessages.lacks(
        provider,
        "volume snapshots",
        `named volumes (${plan.volumes.join(", ")}) need, captured in one snapshot with the services`,
      ),
    );
  }
  if (plan.agent.sandbox !== undefined || plan.agent.capabilities !== undefined) {
    throw new DenvError(
      "invalid_request",
      ProviderMessages.lacks(
        provider,
        `x-denv.agent.sandbox ${plan.agent.sandbox ?? "capabilities"}`,
        "a root agent confined by denv's own sandbox needs",
      ),
    );
  }
  if (plan.verifier !== undefined) checkVerifier(plan.verifier, service, provider);
  if (plan.egress === "mirrors") {
    throw new DenvError(
      "invalid_request",
      ProviderMessages.lacks(
        provider,
        "mirror egress",
        "x-denv.egress: mirrors needs (denvd's proxy on the environment's network)",
      ),
    );
  }
  if (plan.disk !== undefined && plan.disk.explicit.length > 0) {
    throw new DenvError(
      "invalid_request",
      ProviderMessages.lacks(provider, "disk caps", `x-denv.disk (${plan.disk.explicit.join(", ")}) needs`),
    );
  }
  const key = (name: string, why: string): never => {
    throw new DenvError(
      "invalid_compose",
      ProviderMessages.unsupportedKey(provider, service.name, name, why),
    );
  };
  const s = service;
  if (s.entrypoint !== undefined) key("entrypoint", "the template's start command is the service's command");
  if (s.healthcheck !== undefined && s.command === undefined)
    key(
      "healthcheck",
      "it is the ready check of the template's start command, and the service has no command",
    );
  if (s.tmpfs.length > 0) key("tmpfs", "the sandbox has one disk");
  if (s.expose.length > 0) key("expose", "there is no other service to reach it");
  if (s.ports.length > 0) key("ports", `${provider} publishes ports through its own domain, not the host's`);
  if (Object.keys(s.labels).length > 0) key("labels", "a sandbox has metadata, not container labels");
  if (s.init !== undefined) key("init", `${provider}'s own init runs the sandbox`);
  if (s.stopGracePeriodMs !== undefined) key("stop_grace_period", "sandboxes are killed, not stopped");
  if (s.restart !== undefined && s.restart !== "no")
    key("restart", `${provider} starts the service's command once, when the sandbox starts`);
  if (s.capDrop.length > 0) key("cap_drop", `${provider} decides the sandbox's capabilities`);
  if (s.networkMode !== undefined)
    key("network_mode", `${provider}'s network policy decides the sandbox's network`);
  if (s.hostname !== undefined) key("hostname", `${provider} names the sandbox`);
  if (s.platform !== undefined && s.platform !== "linux/amd64")
    key("platform", `${provider} sandboxes are linux/amd64`);
  if (s.dnsOpt.length > 0 && s.dnsOpt.join(",") !== DEFAULT_DNS_OPT.join(","))
    key("dns_opt", `${provider}'s resolver serves the sandbox`);
  if (s.build && Object.keys(s.build.args).length > 0)
    key("build.args", `${provider}'s template builder takes no build arguments`);
  if (s.build?.target !== undefined)
    key("build.target", `${provider}'s template builder builds the whole Dockerfile`);
  if (s.user !== undefined && s.user !== plan.agent.user) {
    key("user", `only the agent's user (${plan.agent.user}) runs in the sandbox`);
  }
  return s;
}

/**
 * The verifier on E2B. One that needs the fork's services runs in the fork's sandbox as its own
 * user (sandboxes share no network, so a sandbox of its own could not reach them): its image must
 * be the agent service's (the same build or image). One that reads only files
 * (`services: false`) runs in a sandbox of its own from a template of its own image. Neither can
 * go through denvd's mirror proxy.
 */
function checkVerifier(v: VerifierPlan, service: ServicePlan, provider: string): void {
  const lacks = (capability: string, why: string): never => {
    throw new DenvError("invalid_request", ProviderMessages.lacks(provider, capability, why));
  };
  const sameBuild =
    v.build !== undefined &&
    service.build !== undefined &&
    JSON.stringify(v.build) === JSON.stringify(service.build);
  const sameImage = v.build === undefined && service.build === undefined && v.image === service.image;
  if (v.services !== false && !sameBuild && !sameImage) {
    lacks(
      "a verifier container of its own",
      `x-denv.verifier with an image other than service '${service.name}''s needs while it reaches the services (the verifier runs in the fork's sandbox: build it as the service is built, or set services: false)`,
    );
  }
  if (v.build !== undefined && (Object.keys(v.build.args).length > 0 || v.build.target !== undefined))
    lacks(
      "build arguments and targets",
      `x-denv.verifier.build.args or .target needs (${provider}'s template builder builds the whole Dockerfile, without arguments)`,
    );
  if (v.egress === "mirrors")
    lacks(
      "mirror egress",
      "x-denv.verifier.egress: mirrors needs (denvd's proxy on the environment's network)",
    );
}
