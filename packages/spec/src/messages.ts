/**
 * Every user-facing string that docs or tests quote. Defined once in spec; tests assert them
 * verbatim and docs/reference/protections.md lists them. Functions take the variable parts.
 * The protections and what clients print live here (python/tests reads this file for them); the
 * compose subset's, the hosts' and the control plane's lines live in messages/ and are re-exported
 * so that `@denv/spec/messages` stays the one place to import any of them from.
 */

import { ImportMessages } from "./messages/import.js";

export * from "./messages/compose.js";
export * from "./messages/control-plane.js";
export * from "./messages/host.js";
export * from "./messages/import.js";
export * from "./messages/karotte.js";
export * from "./messages/providers.js";

export const Protection = {
  /** 1. The agent is never root. */
  agentRoot: (service: string) =>
    `refused: exec as root in agent service '${service}' of an rl-environment; the agent is never root (protection 1)`,
  /** 2. The verifier runs as a separate principal after the agent stops, on a fork. */
  agentSurvived: (count: number) =>
    `refused: ${count} agent process(es) still running after the kill; the verifier does not start (protection 2)`,
  /** 3. Special files in submissions and uploads are refused. */
  specialFile: (path: string, reason: SpecialFileReason) =>
    `refused: '${path}' is ${reason}; special files are refused in uploads and submissions (protection 3)`,
  /** 5. Egress denied and verified by a probe before every episode. */
  egressLeak: (environment: string, finding: string) =>
    `refused: the egress probe of '${environment}' found a way out (${finding}); the episode does not start (protection 5)`,
} as const;

export const SpecialFileReasons = {
  device: "a device node",
  fifo: "a FIFO",
  symlinkEscapes: "a symlink that escapes the destination",
  hardlinkEscapes: "a hard link that escapes the archive",
  setid: "a file with the setuid or setgid bit",
  climbs: "a path that climbs out (..)",
  absolute: "an absolute path",
  tooDeep: "in a tree deeper than the limit",
  tooLarge: "in a tree larger than the limit",
  unsupported: "an entry of an unsupported type",
} as const;

export type SpecialFileReason = (typeof SpecialFileReasons)[keyof typeof SpecialFileReasons];

/** What an egress probe can find (the `finding` of Protection.egressLeak). */
export const EgressFindings = {
  defaultRoute: (service: string) => `service '${service}' has a default route`,
  routeOut: (service: string) => `service '${service}' has a route off the machine`,
  hostReachable: (service: string) => `service '${service}' reached the host canary`,
  notInternal: (network: string) => `network '${network}' is not internal`,
  extraNetwork: (service: string, network: string) =>
    `service '${service}' is attached to network '${network}' outside the environment`,
  ipv6Address: (service: string, address: string) => `service '${service}' has the IPv6 address ${address}`,
  resolverOutside: (service: string, nameserver: string) =>
    `service '${service}' resolves names through ${nameserver}, outside the environment`,
  dnsLeak: (engine: string) =>
    `Docker Engine ${engine} forwards names from internal networks to the host's loopback resolver (CVE-2024-29018); upgrade to 23.0.11, 25.0.5, 26.0.0 or later`,
} as const;

/** Caps applied when a compose file gives none (protection 4). */
export const DefaultCaps = {
  memoryBytes: 2 * 1024 * 1024 * 1024,
  cpus: 2,
  pids: 1024,
} as const;

/** Disk cap of each named volume and each writable layer when the file gives none, where the host can enforce it. */
export const DefaultDiskBytes = 10 * 1024 * 1024 * 1024;

/**
 * Every exit code of denv's commands (`denv`, `denvd`), in one table. Commands exit `ok`,
 * `failure` (the answer is no: a refusal, a failed deployment, or denv failed) or `usage` (unknown
 * command or flag, wrong arguments). `denv exec` passes its command's code through and uses the
 * codes of `docker exec` for its own: `denvFailure`, `cannotExecute`, `notFound`, and `timedOut`
 * for a command killed at its timeout.
 */
export const ExitCodes = {
  ok: 0,
  failure: 1,
  usage: 2,
  denvFailure: 125,
  cannotExecute: 126,
  notFound: 127,
  timedOut: 124,
} as const;

/**
 * `denv import harbor` and `denv export harbor`: what cannot be mapped between a Harbor task
 * folder and a denv project folder. One line naming the file and the key.
 */
export const HarborTaskMessages = {
  missingFile: (file: string) => `${file}: missing; a Harbor task needs it`,
  noEnvironment: (dir: string) =>
    `${dir}/environment: no Dockerfile, no docker-compose.yaml and no [environment] docker_image in task.toml`,
  ...ImportMessages,
  /** denv.harbor refuses a task that asks for internet access (Harbor: enforce it or refuse). */
  publicNetwork: (task: string) =>
    `refused: task '${task}' asks for network_mode "public", and public_network=refuse is set; an rl-environment reaches at most the host's package mirrors (protection 5): pass --ek public_network=mirrors for those, or deny to run it without internet`,
} as const;

/**
 * denv.verifiers: an agent seat whose harness executes the model's commands itself, in verifiers'
 * subprocess runtime (on the machine running the rollouts, not in the sandbox), is refused.
 */
export const VerifiersMessages = {
  hostShell: (harness: string) =>
    `refused: harness '${harness}' would run the model's commands in verifiers' subprocess runtime, on the machine running the rollouts, outside the denv sandbox; the agent acts only in its sandbox (protection 1): keep the default harness (null) or give it a container runtime (--env.agent.runtime.type docker)`,
} as const;

/** denv.trl (Python): TRL's Harbor environments on denv. */
export const TrlMessages = {
  environmentType: (value: string) =>
    `refused: environment_type '${value}' is a Harbor backend name; denv.trl runs each rollout on a Harbor environment given by import path: environment_type="denv.harbor:DenvEnvironment"`,
} as const;
