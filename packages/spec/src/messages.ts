/**
 * Every user-facing string that docs or tests quote. Defined once here; tests assert them
 * verbatim and docs/reference/protections.md lists them. Functions take the variable parts.
 */

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
  socket: "a socket",
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
} as const;

/** Refusals of the compose subset: one line naming the service, the key and the reason. */
export const Refusal = {
  serviceKey: (service: string, key: string, reason: string) =>
    `service '${service}': '${key}' is refused: ${reason}`,
  topKey: (key: string, reason: string) => `'${key}' is refused: ${reason}`,
} as const;

/** Caps applied when a compose file gives none (protection 4). */
export const DefaultCaps = {
  memoryBytes: 2 * 1024 * 1024 * 1024,
  cpus: 2,
  pids: 1024,
} as const;

/** The exit codes `denv exec` uses for its own failures, as `docker exec` does. */
export const ExitCodes = {
  denvFailure: 125,
  cannotExecute: 126,
  notFound: 127,
  timedOut: 124,
} as const;
