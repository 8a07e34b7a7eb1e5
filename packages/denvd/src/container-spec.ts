import {
  isRootUser,
  type Plan,
  type Resources,
  type ServicePlan,
  toArgv,
  type VerifierPlan,
} from "@denv/spec";
import type Docker from "dockerode";

/**
 * The Docker create options of one service: where the compose plan and the protections meet.
 */

/** Capabilities the agent service keeps in its bounding set. They are never effective for the
 * non-root agent user (no-new-privileges), but let the service's own root processes and denvd's
 * setup (owning the workdir) work. */
export const AGENT_CAPS = ["CHOWN", "DAC_OVERRIDE", "FOWNER", "SETUID", "SETGID", "KILL"];

/**
 * What a confined agent (x-denv.agent.sandbox: gvisor) keeps: Docker's default set but raw
 * sockets and device nodes. Under gVisor these are capabilities of gVisor's own kernel, so root
 * can install packages, own files and bind low ports inside the sandbox and holds nothing on
 * the host. x-denv.agent.capabilities adds SYS_ADMIN or SYS_PTRACE of that same kernel.
 */
export const SANDBOXED_AGENT_CAPS = [
  "CHOWN",
  "DAC_OVERRIDE",
  "FOWNER",
  "FSETID",
  "SETUID",
  "SETGID",
  "SETPCAP",
  "SETFCAP",
  "KILL",
  "NET_BIND_SERVICE",
  "SYS_CHROOT",
  "AUDIT_WRITE",
];

/** Dropped from every other service of an rl-environment, on top of the file's cap_drop. */
export const SERVICE_CAP_DROP = ["NET_RAW", "MKNOD", "AUDIT_WRITE", "SYS_CHROOT", "SETFCAP", "SETPCAP"];

const NS_PER_MS = 1_000_000;

/** Docker's durations are nanoseconds. */
const ns = (ms: number | undefined) => (ms === undefined ? undefined : ms * NS_PER_MS);

export interface SpecInput {
  plan: Plan;
  service: ServicePlan;
  image: string;
  containerName: string;
  networkName: string;
  volumeNames: Record<string, string>;
  /** Cap of the container's writable layer, where the engine can enforce one. */
  layerCapBytes?: number | undefined;
  labels: Record<string, string>;
  /**
   * The volumes hold a snapshot (a fork): the engine must not fill an empty one from the image
   * (its copy-up would also give the volume's root the image's owner and mode).
   */
  restored?: boolean;
  /** Environment variables the agent service gets on top of the file's (the mirror proxy). */
  agentEnv?: Record<string, string>;
  /** The engine's runtime for a sandboxed agent service (x-denv.agent.sandbox), e.g. runsc. */
  agentRuntime?: string | undefined;
}

export function isProtected(plan: Plan): boolean {
  return plan.kind === "rl-environment";
}

export function containerSpec(input: SpecInput): Docker.ContainerCreateOptions {
  const { plan, service: svc } = input;
  const isAgent = svc.name === plan.agent.service;
  const rl = isProtected(plan);
  const sandboxed = isAgent && plan.agent.sandbox !== undefined;
  if (sandboxed && !input.agentRuntime) {
    throw new Error(`service ${svc.name} is sandboxed (${plan.agent.sandbox}) and no runtime was given`);
  }
  const tmpfs: Record<string, string> = {};
  for (const t of svc.tmpfs) {
    const [path = "", opts = ""] = t.split(/:(.*)/s);
    tmpfs[path] = opts;
  }
  const exposed: Record<string, object> = {};
  const bindings: Record<string, Array<{ HostIp: string; HostPort: string }>> = {};
  for (const p of svc.expose) exposed[`${p}/tcp`] = {};
  for (const p of svc.ports) {
    const key = `${p.target}/${p.protocol}`;
    exposed[key] = {};
    bindings[key] = [{ HostIp: p.hostIp ?? "127.0.0.1", HostPort: p.published ? String(p.published) : "" }];
  }
  const hc = svc.healthcheck;
  const cmd = toArgv(svc.command);
  const entrypoint = toArgv(svc.entrypoint);
  const networked = svc.networkMode !== "none";
  return {
    name: input.containerName,
    Image: input.image,
    Cmd: cmd,
    Entrypoint: entrypoint,
    Env: Object.entries({ ...svc.environment, ...(isAgent ? input.agentEnv : {}) }).map(
      ([k, v]) => `${k}=${v}`,
    ),
    WorkingDir: svc.workingDir,
    User: svc.user,
    Hostname: svc.hostname ?? svc.name,
    Labels: { ...svc.labels, ...input.labels },
    ExposedPorts: exposed,
    // An empty test keeps the image's own healthcheck.
    Healthcheck:
      hc && hc.test.length > 0
        ? {
            Test: hc.test,
            Interval: ns(hc.intervalMs),
            Timeout: ns(hc.timeoutMs),
            Retries: hc.retries,
            StartPeriod: ns(hc.startPeriodMs),
            // Engines before API 1.44 ignore it; the interval then applies from the start.
            StartInterval: ns(hc.startIntervalMs),
          }
        : undefined,
    StopTimeout: svc.stopGracePeriodMs !== undefined ? Math.ceil(svc.stopGracePeriodMs / 1000) : undefined,
    HostConfig: {
      ...(sandboxed ? { Runtime: input.agentRuntime } : {}),
      NetworkMode: networked ? input.networkName : "none",
      Mounts: svc.volumes.map((v) => ({
        Type: "volume" as const,
        Source: input.volumeNames[v.source] ?? v.source,
        Target: v.target,
        ReadOnly: v.readOnly,
        ...(input.restored
          ? { VolumeOptions: { NoCopy: true, Labels: {}, DriverConfig: { Name: "local", Options: {} } } }
          : {}),
      })),
      Tmpfs: tmpfs,
      StorageOpt: input.layerCapBytes !== undefined ? { size: String(input.layerCapBytes) } : undefined,
      ...confinement(svc.resources, {
        capDrop: rl ? (isAgent ? ["ALL"] : [...new Set([...SERVICE_CAP_DROP, ...svc.capDrop])]) : svc.capDrop,
        capAdd: sandboxed
          ? [...SANDBOXED_AGENT_CAPS, ...(plan.agent.capabilities ?? [])]
          : rl && isAgent
            ? AGENT_CAPS
            : [],
        // Kind service asks for it in the file (security_opt): there, root must keep its
        // capabilities in `exec --user root` when the service runs as a non-root user.
        noNewPrivileges: rl || svc.noNewPrivileges === true,
        dnsOptions: svc.dnsOpt,
        noIpv6: plan.egress !== "allow" && networked,
      }),
      RestartPolicy: {
        Name: svc.restart && svc.restart !== "no" ? svc.restart : "",
        MaximumRetryCount: svc.restartMaxRetries,
      },
      // Under gVisor the processes denvd kills are reaped by an init (runsc lists zombies too).
      Init: sandboxed ? true : svc.init,
      PortBindings: bindings,
    },
    NetworkingConfig: networked
      ? { EndpointsConfig: { [input.networkName]: { Aliases: [svc.name, ...svc.aliases] } } }
      : undefined,
  };
}

export interface VerifierSpecInput {
  verifier: VerifierPlan;
  image: string;
  containerName: string;
  /** The fork's network: the verifier reaches the fork's services, nothing else. */
  networkName: string;
  workingDir: string;
  env: Record<string, string>;
  labels: Record<string, string>;
}

/**
 * What a verifier that asked for root keeps: enough for its tests to install their tools (apt
 * drops to its own user, writes as root), nothing that reaches the host.
 */
export const VERIFIER_ROOT_CAPS = ["CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "SETUID", "SETGID", "KILL"];

/**
 * The verifier's own container: its image, its user (non-root unless the file asked for root in
 * this container), every capability dropped but what a root verifier needs.
 */
export function verifierContainerSpec(input: VerifierSpecInput): Docker.ContainerCreateOptions {
  const v = input.verifier;
  return {
    name: input.containerName,
    Image: input.image,
    Cmd: typeof v.command === "string" ? ["sh", "-c", v.command] : v.command,
    User: v.user,
    WorkingDir: input.workingDir,
    Env: Object.entries({ ...input.env, ...v.environment }).map(([k, val]) => `${k}=${val}`),
    Labels: input.labels,
    HostConfig: {
      NetworkMode: input.networkName,
      ...confinement(v.resources, {
        capDrop: ["ALL"],
        capAdd: isRootUser(v.user) ? VERIFIER_ROOT_CAPS : [],
        noNewPrivileges: true,
        // Names outside the fork fail at once instead of waiting out the resolver.
        dnsOptions: ["timeout:1", "attempts:1"],
        noIpv6: true,
      }),
    },
  };
}

/** Caps (protection 4), capabilities and privilege settings every container denvd creates gets. */
function confinement(
  resources: Resources,
  o: { capDrop: string[]; capAdd: string[]; noNewPrivileges: boolean; dnsOptions: string[]; noIpv6: boolean },
): Docker.HostConfig {
  return {
    // Protection 5 for IPv6: no address, so no route to the host's or anyone's IPv6 (the reject
    // rules cover IPv6 too, and the probe reports any address that appears).
    Sysctls: o.noIpv6
      ? { "net.ipv6.conf.all.disable_ipv6": "1", "net.ipv6.conf.default.disable_ipv6": "1" }
      : undefined,
    Memory: resources.memoryBytes,
    MemorySwap: resources.memoryBytes,
    NanoCpus: Math.round(resources.cpus * 1e9),
    PidsLimit: resources.pids,
    CapDrop: o.capDrop,
    CapAdd: o.capAdd,
    SecurityOpt: o.noNewPrivileges ? ["no-new-privileges:true"] : [],
    DnsOptions: o.dnsOptions,
  };
}
