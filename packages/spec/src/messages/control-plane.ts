/** Refusals and failures of the control plane: placement, pools, sandboxes and its own. */

/**
 * Placement (docs/reference/targets.md#placement): why a candidate host was left out (the `place`
 * phase's evidence) and the one-line errors when none is left. Amounts come formatted ("4 GiB").
 */
export const PlacementMessages = {
  /** A candidate without one of the placement labels asked for. */
  missingLabel: (label: string) => `missing label ${label}`,
  /** A candidate without room: `resource` is memory, cpus or pids. */
  notEnough: (resource: string, need: string, free: string, limit: string) =>
    `not enough ${resource}: needs ${need}, ${free} free of ${limit}`,
  /** Online hosts take new environments, but none carries every label asked for. */
  noHostWithLabels: (target: string, labels: string) =>
    `no host in target '${target}' carries the placement labels ${labels}: give a host those labels (denvd join --label k=v) or change x-denv.placement (denv deploy --placement k=v)`,
  /** Hosts with the labels exist, and none has room; `closest` is the nearest miss (host: why). */
  noHostWithRoom: (target: string, need: string, closest: string, setting: string) =>
    `no host in target '${target}' has room for an environment that reserves ${need} (${closest}): destroy environments or sandboxes, join another host, or raise ${setting}`,
  /** Fork, rollback or sandbox of a version whose every holder (`hosts`, comma-separated) is offline. */
  versionHoldersOffline: (version: string, hosts: string) =>
    `no host holding ${version} is online (${hosts}): it can be restored there, or sent from there to another host, once one of them reconnects`,
  /** Fork, rollback or sandbox of a version no host holds any more (its holders lost it). */
  versionNotHeld: (version: string) =>
    `no host holds ${version} any more: deploy or snapshot again for a new version`,
} as const;

/** The most warm forks one project's pool keeps. */
export const MAX_POOL_SIZE = 64;

/** Warm fork pools (docs/how-to/warm-pools.md). */
export const PoolMessages = {
  /** A pooled fork whose egress probe failed at claim time: destroyed, never handed out. */
  discarded: (member: string, why: string) =>
    `pooled fork ${member} failed its egress probe at claim time and was destroyed, not handed out: ${why}`,
  /** PUT /v1/projects/:project/pool with a size outside 0..MAX_POOL_SIZE. */
  badSize: (size: string) => `a pool size is a whole number from 0 to ${MAX_POOL_SIZE}, not ${size}`,
} as const;

/** POST /v1/sandboxes with `count`. */
export const SandboxMessages = {
  /** Sandbox `index` (1-based) of `count` failed; every one created before was destroyed. */
  batchFailed: (index: number, count: number, sandbox: string, why: string, destroyed: number) =>
    `sandbox ${index} of ${count} (${sandbox}) failed: ${why}; the ${destroyed} created in this call were destroyed`,
  /** ... and destroying some of them failed too (they are named, so nothing is left unseen). */
  cleanupFailed: (sandbox: string, why: string) => `destroying ${sandbox} failed: ${why}`,
  /** exec, files, logs, probe or a tunnel into a sandbox whose destroy was asked. */
  destroying: (sandbox: string) =>
    `sandbox ${sandbox} is being destroyed: it takes no more exec, files or tunnels`,
} as const;

/** Refusals and failures of the control plane that docs quote. */
export const ControlPlaneMessages = {
  /** A host's result that does not answer the command it was sent (the result is not recorded). */
  wrongAnswer: (host: string, kind: string, why: string) =>
    `host ${host} answered ${kind} for something it was not asked about (${why}); the result is not recorded`,
  targetKindNotAvailable: (kind: string) => `target kind ${kind} is not available yet`,
  /** A git deploy of a project that has no repository. */
  noRepo: (project: string) =>
    `project ${project} has no repository: create it with --repo URL, connect it (denv projects connect-github OWNER/REPO), or upload the folder`,
  noOnlineHost: (target: string) =>
    `no online host in target '${target}': join one with denvd join --url URL --token TOKEN`,
  hostOffline: (host: string) =>
    `host ${host} is offline: its environments are unreachable until denvd reconnects`,
  versionInUse: (version: string, environments: readonly string[]) =>
    `version ${version} is in use by ${environments.join(", ")}: destroy those environments first`,
  projectHasEnvironments: (project: string, count: number) =>
    `project ${project} has ${count} environment(s): destroy them first`,
  /** A WebSocket route asked without an upgrade (400). */
  notAnUpgrade: (path: string) =>
    `GET ${path} is a WebSocket: send it with 'Connection: Upgrade' and 'Upgrade: websocket'`,
  resumeTimedOut: (host: string, seconds: number) =>
    `host ${host} did not answer within ${seconds}s after the control plane restarted; the deployment is failed`,
  /** A page of the dashboard asked of a control plane whose --web-dir holds no build of packages/web. */
  dashboardNotBuilt: "the dashboard is not built on this control plane: run npm run build (packages/web)",
  /** x-denv.verifier.smoke.expect not met: the deploy fails before alpha switches (the version stays). */
  smokeMismatch: (version: string, got: string, expected: number) =>
    `smoke verify of ${version}: ${got}, where x-denv.verifier.smoke.expect is ${expected}; the environment still runs the version it ran`,
  /** A file of the dashboard that its build does not have (or a path that could leave the build). */
  noDashboardFile: (path: string) => `no file ${path} in the dashboard`,
} as const;
