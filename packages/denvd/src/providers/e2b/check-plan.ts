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
/** What a provider runtime carries over beyond one sandbox of one service's command. */
export interface CheckOptions {
  /** Several services, a sandbox each, on a network of the provider's between them. */
  multiService?: boolean;
  /** A named volume is a folder of its one service's sandbox disk, captured with it. */
  volumesOnDisk?: boolean;
  /** A service without a compose `command` runs its Dockerfile's ENTRYPOINT and CMD. */
  imageCommands?: boolean;
  /** Sandboxes are deleted, never stopped: a stop's grace period has nothing to apply to. */
  neverStopped?: boolean;
  /** A verifier of an image of its own gets a sandbox of its own on the fork's network. */
  ownVerifier?: boolean;
  /** `cap_drop` is applied when the service starts (root starts it through setpriv). */
  capDrop?: boolean;
}

/** Whether the verifier is of the agent service's image (the same build, or the same image). */
export function verifierSharesImage(v: VerifierPlan, service: ServicePlan): boolean {
  if (v.build !== undefined || service.build !== undefined)
    return v.build !== undefined && JSON.stringify(v.build) === JSON.stringify(service.build);
  return v.image === service.image;
}

export function checkPlan(plan: Plan, provider: string = PROVIDER, opts: CheckOptions = {}): ServicePlan {
  const service = plan.services.find((s) => s.name === plan.agent.service);
  if (!service || (plan.services.length > 1 && !opts.multiService)) {
    throw new DenvError(
      "invalid_request",
      ProviderMessages.lacks(provider, "multi_service", `a file of ${plan.services.length} services needs`),
    );
  }
  if (opts.volumesOnDisk) checkVolumesOnDisk(plan, provider);
  else if (plan.volumes.length > 0) {
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
  if (plan.verifier !== undefined) checkVerifier(plan.verifier, service, provider, opts);
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
  const multi = plan.services.length > 1;
  for (const s of plan.services) checkService(plan, s, provider, multi, opts);
  return service;
}

/**
 * The compose keys of one service that a sandbox carries over, the others refused. With several
 * services (a provider's private network between their sandboxes), `expose` opens the service's
 * ports to the others, each service runs as its own compose user, and a dependency is waited for
 * to start or be healthy, never to exit.
 */
function checkService(
  plan: Plan,
  s: ServicePlan,
  provider: string,
  multi: boolean,
  opts: CheckOptions,
): void {
  const key = (name: string, why: string): never => {
    throw new DenvError("invalid_compose", ProviderMessages.unsupportedKey(provider, s.name, name, why));
  };
  if (s.entrypoint !== undefined) key("entrypoint", "the template's start command is the service's command");
  if (s.healthcheck !== undefined && s.command === undefined && !opts.imageCommands)
    key(
      "healthcheck",
      "it is the ready check of the template's start command, and the service has no command",
    );
  if (s.tmpfs.length > 0) key("tmpfs", "the sandbox has one disk");
  if (s.expose.length > 0 && !multi) key("expose", "there is no other service to reach it");
  if (s.ports.length > 0) key("ports", `${provider} publishes ports through its own domain, not the host's`);
  if (Object.keys(s.labels).length > 0) key("labels", "a sandbox has metadata, not container labels");
  if (s.init !== undefined) key("init", `${provider}'s own init runs the sandbox`);
  if (s.stopGracePeriodMs !== undefined && !opts.neverStopped)
    key("stop_grace_period", "sandboxes are killed, not stopped");
  if (s.restart !== undefined && s.restart !== "no")
    key("restart", `${provider} starts the service's command once, when the sandbox starts`);
  if (s.capDrop.length > 0 && !opts.capDrop)
    key("cap_drop", `${provider} decides the sandbox's capabilities`);
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
  if (s.user !== undefined && s.user !== plan.agent.user && s.name === plan.agent.service) {
    key("user", `only the agent's user (${plan.agent.user}) runs in the sandbox`);
  }
  const waited = s.dependsOn.find((d) => d.condition === "service_completed_successfully");
  if (waited)
    key(
      "depends_on",
      `a sandbox's service is waited for to start or be healthy, not to exit ('${waited.service}')`,
    );
}

/**
 * The verifier on E2B. One that needs the fork's services runs in the fork's sandbox as its own
 * user (sandboxes share no network, so a sandbox of its own could not reach them): its image must
 * be the agent service's (the same build or image). One that reads only files
 * (`services: false`) runs in a sandbox of its own from a template of its own image. Neither can
 * go through denvd's mirror proxy.
 */
function checkVerifier(v: VerifierPlan, service: ServicePlan, provider: string, opts: CheckOptions): void {
  const lacks = (capability: string, why: string): never => {
    throw new DenvError("invalid_request", ProviderMessages.lacks(provider, capability, why));
  };
  if (v.services !== false && !verifierSharesImage(v, service) && !opts.ownVerifier) {
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

/**
 * Named volumes on a sandbox's own disk: each must be one service's (sandboxes share no disk),
 * writable (a folder of the disk is), and captured by every snapshot (a checkpoint holds the
 * whole disk).
 */
function checkVolumesOnDisk(plan: Plan, provider: string): void {
  const lacks = (capability: string, why: string): never => {
    throw new DenvError("invalid_request", ProviderMessages.lacks(provider, capability, why));
  };
  for (const volume of plan.volumes) {
    const mounts = plan.services.flatMap((s) =>
      s.volumes.filter((m) => m.source === volume).map((m) => ({ service: s.name, ...m })),
    );
    const users = [...new Set(mounts.map((m) => m.service))];
    if (users.length > 1)
      lacks(
        "shared volumes",
        `volume '${volume}' of services ${users.join(", ")} needs (each service's sandbox has a disk of its own)`,
      );
    if (mounts.some((m) => m.readOnly))
      lacks(
        "read-only volumes",
        `volume '${volume}' mounted read-only needs (it is a folder of the sandbox's disk)`,
      );
    if (!plan.snapshotVolumes.includes(volume))
      lacks(
        "volumes left out of snapshots",
        `x-denv.snapshot without volume '${volume}' needs (a checkpoint holds the sandbox's whole disk)`,
      );
  }
}
