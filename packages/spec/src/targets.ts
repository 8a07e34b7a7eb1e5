import { parseDocument } from "yaml";
import { z } from "zod";

/**
 * Target kinds and their capability table (docs/reference/targets.md prints the table from here,
 * and a test holds the page to it); each kind's settings are in targets-settings.ts. Pure: no I/O.
 */

export const TargetKindName = z.enum([
  "hosts",
  "hetzner",
  "aws",
  "daytona-docker",
  "e2b",
  "daytona",
  "modal",
  "prime",
]);
export type TargetKindName = z.infer<typeof TargetKindName>;

export const TARGET_CAPABILITIES = [
  "multi_service",
  "snapshot",
  "fork",
  "pause",
  "egress_control",
  "exec_streaming",
  "files",
  "port_tunnels",
  "gpu",
] as const;
export const TargetCapability = z.enum(TARGET_CAPABILITIES);
export type TargetCapability = z.infer<typeof TargetCapability>;

/** What each capability means, as the reference page says it. */
export const CAPABILITY_MEANINGS: Record<TargetCapability, string> = {
  multi_service: "a whole compose file, several services and their volumes",
  snapshot: "consistent snapshots of all services and volumes",
  fork: "new environments from a version",
  pause: "freezing services (the snapshot's frozen window)",
  egress_control:
    "egress denied and proven by the egress probe from inside (denvd: internal network, default routes removed, host firewall; a hosted kind: its provider's network policy)",
  exec_streaming: "exec with streamed stdin/stdout/stderr",
  files: "tar upload and download with the special-file check",
  port_tunnels: "TCP tunnels to a service port (denv port-forward)",
  gpu: "GPU devices in services",
};

type CapabilityRow = Record<TargetCapability, boolean>;

/** Every capability a denvd host has: denv's own runtime. GPU devices are refused by denv's compose subset. */
const DENVD: CapabilityRow = {
  multi_service: true,
  snapshot: true,
  fork: true,
  pause: true,
  egress_control: true,
  exec_streaming: true,
  files: true,
  port_tunnels: true,
  gpu: false,
};

export interface TargetKindSpec {
  /** `hosts` (machines you join), `provisioned` (machines denv creates in your cloud account), `hosted` (a sandbox provider). */
  family: "hosts" | "provisioned" | "hosted";
  /** Whether this control plane has the driver (a target of a kind without one is refused). */
  available: boolean;
  capabilities: CapabilityRow;
  /** What enforces the protections on this kind (the protection evidence names it). */
  enforcedBy: string;
}

/**
 * The capability table. Provisioned kinds run denvd on the machines they create, so they can do
 * what `hosts` does. Hosted kinds are listed with what their bridges do; placement refuses what a
 * row lacks. A kind listed before its driver exists is not `available`: a target of it is refused.
 */
export const TARGET_KINDS: Record<TargetKindName, TargetKindSpec> = {
  hosts: { family: "hosts", available: true, capabilities: DENVD, enforcedBy: "denvd" },
  hetzner: { family: "provisioned", available: true, capabilities: DENVD, enforcedBy: "denvd" },
  aws: { family: "provisioned", available: true, capabilities: DENVD, enforcedBy: "denvd" },
  // Daytona sandboxes as machines: each one a Docker-capable Daytona sandbox (a snapshot of an
  // image that ships Docker Engine) in which the control plane runs its install script through
  // Daytona's toolbox; denvd there joins like any host and runs whole compose files on the
  // sandbox's own engine (Daytona's Docker-in-Docker). Everything a host does, denvd enforces.
  "daytona-docker": { family: "provisioned", available: true, capabilities: DENVD, enforcedBy: "denvd" },
  e2b: {
    family: "hosted",
    available: true,
    // A bridge (denvd --provider e2b, run by the control plane): one sandbox per environment; a
    // version is an E2B snapshot of it (`createSnapshot`), a fork a new sandbox from that snapshot
    // (`Sandbox.create(snapshotId)`), as the e2b SDK 2.51 does them. Pause is E2B's (`pause`, a
    // resume by `connect`): env stop and start. No tunnels. Egress control is E2B's network policy
    // (no internet access), probed from inside each sandbox as denvd probes its own networks; the
    // evidence names E2B.
    capabilities: {
      ...DENVD,
      multi_service: false,
      port_tunnels: false,
    },
    enforcedBy: "e2b",
  },
  daytona: {
    family: "hosted",
    available: true,
    // A bridge (denvd --provider daytona): one sandbox per environment, made with the agent's user
    // as its one OS user (Daytona's toolbox has no per-command user); a version is a Daytona
    // snapshot of its filesystem (`createSnapshot`), a fork a new sandbox from it, as
    // @daytonaio/sdk 0.218 does them. No pause: Daytona's stop ends every process (env stop and
    // start, and the verify's stop of the agent). No tunnels. Egress control is Daytona's
    // `networkBlockAll`, probed from inside each sandbox; the evidence names Daytona.
    capabilities: { ...DENVD, multi_service: false, pause: false, port_tunnels: false },
    enforcedBy: "daytona",
  },
  modal: {
    family: "hosted",
    available: true,
    // A bridge (denvd --provider modal): one sandbox per environment from an image Modal's image
    // API builds of its one service (its Dockerfile as Dockerfile commands, the files a COPY names
    // carried inside them), as the modal SDK 0.11 does it; commands and files run as any user of
    // the image through /usr/bin/setpriv run by the sandbox's root (Modal's exec takes no user),
    // the agent's resolved through the passwd; a version is Modal's `snapshotFilesystem` (an
    // image, no processes), a fork a sandbox from it, its service started anew. No pause (Modal
    // has none), no tunnels, one service. Egress control is `blockNetwork`, probed from inside
    // each sandbox; the evidence names Modal.
    capabilities: { ...DENVD, multi_service: false, pause: false, port_tunnels: false },
    enforcedBy: "modal",
  },
  prime: {
    family: "hosted",
    available: true,
    // A bridge (denvd --provider prime): one sandbox per service from an image Prime's image API
    // builds of it, the services' sandboxes members of a Prime private network of the
    // environment's own (each reached by its service name, on the ports it exposes); commands and
    // files run as any user of the agent service's image (Prime's command sessions take a user),
    // the agent's resolved through the passwd; a version is a Prime checkpoint of each sandbox
    // (root filesystems, no processes), taken with every service's processes stopped (Prime has
    // no pause: denvd stops them itself), a fork sandboxes restored from them, services started
    // anew. No pause of a running environment, no tunnels, no volumes. Egress control is an empty
    // network allowlist, probed from inside the agent's sandbox; the evidence names Prime.
    capabilities: { ...DENVD, pause: false, port_tunnels: false },
    enforcedBy: "prime",
  },
};

/** GET /v1/targets/kinds */
export const TargetKindInfo = z.object({
  kind: TargetKindName,
  family: z.enum(["hosts", "provisioned", "hosted"]),
  available: z.boolean(),
  capabilities: z.record(TargetCapability, z.boolean()),
  /** The settings `targets add` takes for this kind, and the credentials it reads. */
  settings: z.array(z.string()),
  credentials: z.array(z.object({ name: z.string(), env: z.string() })),
});
export type TargetKindInfo = z.infer<typeof TargetKindInfo>;
export const TargetKindList = z.object({ kinds: z.array(TargetKindInfo) });

// ---- settings

export const TargetMessages = {
  unknownSetting: (kind: string, key: string, known: readonly string[]) =>
    `'${key}' is not a setting of ${kind} targets; they take ${known.length ? known.join(", ") : "none"}`,
  badSetting: (kind: string, key: string, value: string, rule: string) =>
    `${kind} setting ${key}=${value} is not valid: expected ${rule}`,
  missingSetting: (kind: string, key: string, rule: string) =>
    `${kind} targets need the setting ${key} (${rule})`,
  unknownCredential: (kind: string, key: string, known: readonly string[]) =>
    `'${key}' is not a credential of ${kind} targets; they take ${known.length ? known.join(", ") : "none"}`,
  missingCredential: (kind: string, key: string, env: string) =>
    `${kind} targets need the credential ${key}: set ${env} (denv targets add reads it from there)`,
  minAboveMax: (min: number, max: number) =>
    `min_machines=${min} is more than max_machines=${max}: the target could never hold its minimum`,
  /** Placement: the file needs a capability the target's kind lacks (nothing was created). */
  capabilityMissing: (target: string, kind: string, capability: string, why: string) =>
    `target '${target}' (kind ${kind}) cannot run this environment: it lacks ${capability}, which ${why}`,
  targetInUse: (target: string, count: number) =>
    `target ${target} has ${count} host(s) or machine(s): remove them first (denv hosts rm), or remove the target with --force, which deletes a provisioned target's machines`,
  localTarget: "the local target cannot be removed: denv up joins this machine's denvd to it",
  notProvisioned: (target: string, kind: string) =>
    `target ${target} is of kind ${kind}, which has no machines: only provisioned kinds (hetzner, aws, daytona-docker) and hosted ones (e2b, daytona, modal, prime: their bridge) do`,
  /** Placement on a provisioned target with no host that takes the environment yet. */
  machineStarting: (target: string, machine: string) =>
    `no host in target '${target}' takes this environment yet: machine ${machine} is being created for it and joins when it has booted; deploy again once denv targets machines ${target} shows it joined`,
  reconcileFailed: (target: string, why: string) =>
    `target ${target} was not reconciled with its provider: ${why}`,
  /** A provisioned machine that did not join within the cp's --provision-join-timeout-ms: deleted. */
  notJoined: (within: string) =>
    `did not join within ${within} of its creation (a failed boot or cloud-init, or its join token used elsewhere): deleted`,
  /** A daytona-docker machine whose sandbox did not start or whose install failed (its sandbox deleted). */
  installFailed: (sandbox: string, why: string) => `install in Daytona sandbox ${sandbox} failed: ${why}`,
  /** Removing a provisioned target whose provider could not list or delete its machines (the target is kept). */
  removeFailed: (target: string, why: string) =>
    `target ${target} was not removed: its provider could not list or delete its machines: ${why}`,
  bundleMissing: (path: string) =>
    `the denvd bundle is not built (${path}): run npm run -s build, then node packages/denvd/scripts/bundle.mjs`,
  atMaxMachines: (target: string, max: number) =>
    `no host in target '${target}' takes this environment and it already has max_machines=${max} machines: raise max_machines or free room`,
} as const;

/** What an environment needs of its target, and why (a refusal quotes the reason). */
export interface EnvironmentNeeds {
  /** Services in the file. */
  services: number;
  /** The project kind: rl-environment needs the egress probe and snapshots for its verifier. */
  kind: "rl-environment" | "service";
}

/** The first capability `needs` asks of `kind` that the kind lacks, with why it is needed. */
export function missingCapability(
  kind: TargetKindName,
  needs: EnvironmentNeeds,
): { capability: TargetCapability; why: string } | undefined {
  const caps = TARGET_KINDS[kind].capabilities;
  const asked: Array<[TargetCapability, string]> = [];
  if (needs.services > 1) asked.push(["multi_service", `a file of ${needs.services} services needs`]);
  asked.push(["snapshot", "every deploy needs to record its version"]);
  asked.push(["exec_streaming", "exec into the environment needs"]);
  asked.push(["files", "the files API needs"]);
  if (needs.kind === "rl-environment") {
    asked.push(["fork", "an rl-environment needs for its verifier and sandboxes"]);
    asked.push(["egress_control", "an rl-environment's egress protection needs"]);
  }
  const found = asked.find(([c]) => !caps[c]);
  return found && { capability: found[0], why: found[1] };
}

/** A provisioned target's machine, as GET /v1/targets/:target/machines lists it. */
export const Machine = z.object({
  id: z.string(),
  target: z.string(),
  /** The provider's id of the server. */
  provider_id: z.string().optional(),
  status: z.enum(["creating", "running", "joined", "deleting", "deleted", "failed"]),
  /** What it costs: provider, machine type and location (e.g. hetzner/cx22/fsn1). */
  cost_class: z.string(),
  /** The host it joined as, once denvd joined. */
  host_id: z.string().optional(),
  error: z.string().optional(),
  created_at: z.string(),
  updated_at: z.string(),
});
export type Machine = z.infer<typeof Machine>;
export const MachineList = z.object({ machines: z.array(Machine) });

/**
 * What a compose file asks of its target, read without validating it (the host validates): how
 * many services it has. Undefined when the text is not a mapping with `services`.
 */
export function composeServiceCount(text: string): number | undefined {
  try {
    const doc = parseDocument(text, { uniqueKeys: false }).toJS({ maxAliasCount: 100 }) as unknown;
    const services = doc && typeof doc === "object" ? (doc as Record<string, unknown>).services : undefined;
    return services && typeof services === "object" && !Array.isArray(services)
      ? Object.keys(services).length
      : undefined;
  } catch {
    return undefined;
  }
}
