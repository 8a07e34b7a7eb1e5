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
 * Compose lines that are not "is refused": a key the file must give, and problems of the
 * file as a whole. `source` is the file's display name (e.g. `compose.yaml`).
 */
export const ComposeMessages = {
  notYaml: (source: string, detail: string) => `${source} is not valid YAML: ${detail}`,
  notMapping: (source: string) => `${source} is not a compose file: its top level is not a mapping`,
  noServices: (source: string) => `${source} defines no services: add at least one under 'services'`,
  serviceMissing: (service: string, key: string, what: string) =>
    `service '${service}': '${key}' is missing: ${what}`,
  topMissing: (key: string, what: string) => `'${key}' is missing: ${what}`,
  /** No x-denv.agent and no service the default rule picks. */
  agentNeeded: (services: readonly string[]) =>
    `'x-denv.agent' is needed: the file has ${services.length} services (${services.join(", ")}) and none is named 'main' or 'default'; set x-denv.agent to the service the agent works in`,
} as const;

/** Notes of an accepted compose file (Plan.notes): what denv changed or ignored, never silently. */
export const ComposeNotes = {
  versionObsolete: "'version' is obsolete and ignored",
  variableUnset: (name: string) => `variable '${name}' is not set; an empty string was substituted`,
  environmentUnset: (service: string, name: string) =>
    `service '${service}': environment '${name}' is not set in the shell, so it stays unset in the container`,
  verifierEnvironmentUnset: (name: string) =>
    `x-denv.verifier: environment '${name}' is not set in the shell, so it stays unset in the verifier`,
  networksMerged: (networks: readonly string[]) =>
    `networks ${networks.map((n) => `'${n}'`).join(", ")} are merged into the environment's single internal network; services on different networks can reach each other`,
  dependsOnRestartIgnored: (service: string, dependency: string) =>
    `service '${service}': 'depends_on.${dependency}.restart' is ignored: denv deploys and restarts an environment as a whole`,
  optionalDependencyMissing: (service: string, dependency: string) =>
    `service '${service}': optional dependency '${dependency}' is not defined and is ignored`,
  yamlWarning: (detail: string) => `YAML warning: ${detail}`,
} as const;

/** Shared words of the reasons below. */
const NAMED_ONLY = "only named volumes declared under top-level 'volumes' are isolated and snapshotted";
const NOT_SUPPORTED = "not supported by denv";

/**
 * Reasons of compose refusals: the `reason` of Refusal.serviceKey and Refusal.topKey.
 * Each says why, so the user knows what to change.
 */
export const ComposeReasons = {
  unknownKey: "it is not a key denv knows; unknown keys are refused, never dropped",
  expected: (what: string, got: string) => `expected ${what}, got ${got}`,
  notSupported: (what: string) => `${what} ${NOT_SUPPORTED}`,
  invalidInterpolation: (text: string) =>
    `invalid interpolation format in "${text}"; write a literal $ as $$`,
  requiredVariable: (name: string, message: string) =>
    message === ""
      ? `required variable '${name}' is missing a value`
      : `required variable '${name}' is missing a value: ${message}`,
  invalidName: (name: string, rule: string) => `'${name}' is not a valid name: ${rule}`,

  // Top level.
  secretsConfigs:
    "compose secrets and configs read files from the host; put the data in the image or a named volume",
  include: "include reads other compose files; put every service in this file",
  externalVolume:
    "an external volume lives outside the environment and cannot be snapshotted or forked; declare it without 'external'",
  volumeDriver: (driver: string) =>
    `driver '${driver}' is not the local driver denv snapshots; remove 'driver'`,
  volumeDriverOpts: "driver options can mount host paths or remote storage into the environment",
  volumeName: "denv names volumes itself: every fork gets its own copy",
  volumeLabels: "denv labels volumes itself (ai.denv.*)",
  externalNetwork: "an external network connects the environment to containers outside it (protection 5)",
  networkDriver: (driver: string) =>
    `driver '${driver}' is not bridge; denv maps networks onto the environment's single internal bridge network`,
  networkNotInternal: "the environment's network is always internal; egress is set by x-denv.egress",
  networkOption: (key: string) =>
    `'${key}' does not apply: denv maps every network onto the environment's single internal network, which it creates itself`,

  // Services: protections.
  privileged: "privileged containers can escape isolation",
  capAdd: "added capabilities widen what a process can do to the host kernel; only cap_drop is accepted",
  devices: "host devices give the container direct access to the host's hardware",
  networkModeHost:
    "host networking shares the host's network stack and bypasses the egress block (protection 5)",
  networkModeJoin: (target: string) =>
    `joining the network stack of '${target}' bypasses the environment's own network; only 'none' is accepted`,
  networkModeOther: (mode: string) =>
    `'${mode}' is not the environment's internal network; leave network_mode out, or use 'none'`,
  namespaceHost: (namespace: string) =>
    `sharing the host's ${namespace} namespace breaks isolation from the host`,
  namespaceJoin: (namespace: string, target: string) =>
    `sharing the ${namespace} namespace of '${target}' breaks isolation between containers`,
  namespaceOther: (namespace: string) => `denv sets the ${namespace} namespace itself`,
  cgroupParent: "a custom cgroup parent escapes the caps denv applies (protection 4)",
  runtime: "another container runtime changes the isolation denv applies and verifies",
  securityOptDisables: (option: string) => `'${option}' turns off confinement that denv keeps on`,
  securityOptOther: (option: string) =>
    `'${option}' overrides the security options denv sets itself (no-new-privileges, the default seccomp and AppArmor profiles)`,
  sysctls: "kernel parameters can weaken network and process isolation",
  extraHosts: "extra host entries point names at addresses outside the environment",
  dns: "custom DNS servers are a way past the egress block (protection 5); dns_opt is accepted",
  volumesFrom:
    "sharing another container's volumes can reach data outside the environment; mount named volumes instead",
  links: "links are legacy; services reach each other by name on the environment's network",
  externalLinks: "external links reach containers outside the environment",
  containerName: "denv names containers itself: an environment runs as many forks",
  useApiSocket: "the Docker API controls the host",
  oomKillDisable: "a service must stay killable at its memory cap (protection 4)",
  portsOnRlEnvironment:
    "published ports open an rl-environment to the outside (protection 5); set x-denv.kind: service to publish ports",
  portsWithoutNetwork: "a service with network_mode none has no network to publish ports on",
  networksWithoutNetwork: "a service with network_mode none joins no network",
  labelPrefix: (label: string) => `label '${label}' uses the ai.denv. prefix, which denv owns`,

  // Services: mounts.
  bindMount: (spec: string) => `'${spec}' bind-mounts a host path; ${NAMED_ONLY}`,
  dockerSocket: (spec: string) => `'${spec}' mounts the Docker socket, which controls the host`,
  anonymousVolume: (spec: string) =>
    `'${spec}' is an anonymous volume; name it and declare it under top-level 'volumes' so it is snapshotted`,
  undeclaredVolume: (name: string) => `volume '${name}' is not declared under top-level 'volumes'`,
  volumeMode: (mode: string) => `mode '${mode}' is ${NOT_SUPPORTED}; use 'ro' or 'rw'`,
  mountType: (type: string) => `mount type '${type}' is ${NOT_SUPPORTED}; ${NAMED_ONLY}`,
  notAbsolute: (path: string) => `'${path}' is not an absolute path in the container`,
  undeclaredNetwork: (name: string) => `network '${name}' is not declared under top-level 'networks'`,
  volumeOption: (key: string) => `volume option '${key}' is ${NOT_SUPPORTED}`,

  // Services: build and files.
  absolutePath: (path: string) => `'${path}' is an absolute path; paths must stay inside the project`,
  climbsOut: (path: string) => `'${path}' climbs out of the project; paths must stay inside the project`,
  notFound: (path: string) => `'${path}' does not exist in the project`,
  remoteContext: (context: string) =>
    `'${context}' is a remote build context; use a folder inside the project`,
  buildOption: (key: string) =>
    `build option '${key}' is ${NOT_SUPPORTED}; denv builds with context, dockerfile, args and target`,
  buildHostAccess: (key: string) => `build option '${key}' gives the build access to the host or its network`,
  envFileLine: (path: string, line: number, problem: string) => `'${path}' line ${line}: ${problem}`,

  // Services: values.
  undefinedService: (name: string) => `service '${name}' is not defined`,
  dependencyCycle: (cycle: readonly string[]) => `dependency cycle ${cycle.join(" -> ")}`,
  uncappedPids: "every service has a pid cap (protection 4); give a positive number",
  conflictingCap: (key: string, other: string) => `'${key}' and '${other}' give different values`,
  healthcheckDisabledWithTest: "'disable: true' cannot be combined with 'test'",
  healthcheckTest: "the test is a string, or a list that starts with CMD, CMD-SHELL or NONE",
  deployKey: "only deploy.resources.limits (memory, cpus, pids) is supported",
  replicas: "denv runs one container per service",
  reservations: "caps are limits (protection 4); use deploy.resources.limits",
  deployPlacement: "placement is per environment; use x-denv.placement",
  deployRestartPolicy: "use the service's 'restart'",
  rangeTooLarge: (range: string) => `the range '${range}' has more than 1024 ports`,
  restart: (value: string) =>
    `'${value}' is not a restart policy: use no, always, on-failure[:N] or unless-stopped`,

  // x-denv.
  kind: (kind: string) => `'${kind}' is not a kind: use rl-environment or service`,
  agentRoot:
    "the agent is never root on an rl-environment (protection 1); give a non-root user, or confine it with x-denv.agent.sandbox: gvisor",
  agentSandbox: (value: string) => `'${value}' is not an agent sandbox: use gvisor`,
  verifierEgress: (value: string) =>
    `'${value}' is not a verifier egress policy: use deny, or mirrors (the host's package mirrors, through denvd's proxy)`,
  smoke: (value: string) =>
    `expected true, or a mapping with expect (the reward an untouched deploy must get), got ${value}`,
  verifierSameUser: (user: string) =>
    `the verifier is a separate principal (protection 2); user '${user}' is also the agent's user`,
  egressAllowOnRlEnvironment:
    "an rl-environment denies egress (protection 5); set x-denv.kind: service to allow it",
  egress: (value: string) => `'${value}' is not an egress policy: use deny, mirrors or allow`,
  submissionPath: (path: string) => `'${path}' is not an absolute path without '..' below /`,
  undeclaredSnapshotVolume: (name: string) => `volume '${name}' is not declared under top-level 'volumes'`,
} as const;

/**
 * Compose service keys denv knows and refuses, with the reason. Keys whose reason depends on
 * the value (network_mode, pid, ipc, uts, userns_mode, security_opt, ports) are decided in the
 * validator.
 */
export const RefusedServiceKeys: Readonly<Record<string, string>> = {
  privileged: ComposeReasons.privileged,
  cap_add: ComposeReasons.capAdd,
  devices: ComposeReasons.devices,
  device_cgroup_rules: ComposeReasons.devices,
  gpus: "GPU access is not supported by denv yet",
  cgroup_parent: ComposeReasons.cgroupParent,
  runtime: ComposeReasons.runtime,
  isolation: ComposeReasons.runtime,
  sysctls: ComposeReasons.sysctls,
  extra_hosts: ComposeReasons.extraHosts,
  dns: ComposeReasons.dns,
  dns_search: "search domains send lookups to names outside the environment",
  volumes_from: ComposeReasons.volumesFrom,
  links: ComposeReasons.links,
  external_links: ComposeReasons.externalLinks,
  container_name: ComposeReasons.containerName,
  use_api_socket: ComposeReasons.useApiSocket,
  oom_kill_disable: ComposeReasons.oomKillDisable,
  secrets: ComposeReasons.secretsConfigs,
  configs: ComposeReasons.secretsConfigs,
  extends: "extends reads services from other places; write the service out in full",
  profiles: "profiles start a subset of the services; denv starts every service of the file",
  scale: ComposeReasons.replicas,
  logging: "denv collects service logs itself",
  develop: "watch mode syncs host files into containers",
  label_file: "label files are read from the host; use labels",
  pull_policy: "denv pulls images and pins their digests itself",
  post_start: ComposeReasons.notSupported("lifecycle hooks are"),
  pre_stop: ComposeReasons.notSupported("lifecycle hooks are"),
  tty: "denv attaches no terminal to services (exec sessions ask for one); keep a container alive with a command such as 'sleep infinity'",
  stdin_open:
    "denv attaches no terminal to services (exec sessions ask for one); keep a container alive with a command such as 'sleep infinity'",
  memswap_limit: "denv sets swap together with the memory cap (protection 4); use mem_limit",
  mem_swappiness: "denv sets swap together with the memory cap (protection 4); use mem_limit",
  mem_reservation: "caps are limits (protection 4); use mem_limit",
  cpu_shares: "use cpus; other CPU controls are not supported by denv",
  cpu_quota: "use cpus; other CPU controls are not supported by denv",
  cpu_period: "use cpus; other CPU controls are not supported by denv",
  cpu_rt_runtime: "use cpus; other CPU controls are not supported by denv",
  cpu_rt_period: "use cpus; other CPU controls are not supported by denv",
  cpu_count: "use cpus; other CPU controls are not supported by denv",
  cpu_percent: "use cpus; other CPU controls are not supported by denv",
  cpuset: "use cpus; other CPU controls are not supported by denv",
  blkio_config: ComposeReasons.notSupported("block I/O limits are"),
  storage_opt: ComposeReasons.notSupported("storage driver options are"),
  mac_address: "denv assigns addresses on the environment's network itself",
  credential_spec: ComposeReasons.notSupported("Windows credential specs are"),
  domainname: ComposeReasons.notSupported("domainname is"),
  group_add: ComposeReasons.notSupported("group_add is"),
  oom_score_adj: ComposeReasons.notSupported("oom_score_adj is"),
  read_only: ComposeReasons.notSupported("read_only is"),
  shm_size: ComposeReasons.notSupported("shm_size is"),
  stop_signal: ComposeReasons.notSupported("stop_signal is"),
  ulimits: "pids_limit and mem_limit are the caps denv applies (protection 4); ulimits are not supported",
  annotations: ComposeReasons.notSupported("annotations are"),
  attach: ComposeReasons.notSupported("attach is"),
  provider: ComposeReasons.notSupported("provider services are"),
  models: ComposeReasons.notSupported("models are"),
};

/** What a host refuses of a project, whatever its compose file says. */
export const HostRefusals = {
  /** The project's kind, set by an admin, is authoritative over the file's x-denv.kind. */
  kindMismatch: (project: string, kind: string, asked: string) =>
    `refused: project '${project}' is of kind ${kind}, and its compose file asks for x-denv.kind: ${asked}; a project's kind is set by an admin when the project is created (denv projects create ${project} --kind ${asked}), never by its file`,
  /** x-denv.disk asked for a cap this host has no way to enforce. */
  diskUnenforceable: (what: string, why: string) =>
    `refused: x-denv.disk caps ${what}, and this host cannot enforce it (${why}); remove the cap or deploy on a host that can`,
  /** Images denvd built are scoped to their project: no project runs another's build. */
  /** x-denv.agent.sandbox asked for a runtime the host's engine does not have. */
  sandboxUnavailable: (sandbox: string, runtime: string) =>
    `refused: x-denv.agent.sandbox is ${sandbox}, and this host's Docker engine has no '${runtime}' runtime (scripts/setup-host registers it); deploy on a host that has it`,
  foreignImage: (image: string, owner: string) =>
    `refused: image '${image}' was built on this host for project '${owner}'; a project runs only its own builds and images denv did not build`,
} as const;

/** POST /v1/hosts/join refusals (401), exactly these strings. */
export const JoinTokenMessages = {
  invalid: "join token is not valid",
  expired: "join token is expired",
  usedUp: "join token is used up",
  revoked: "join token is revoked",
} as const;

/** Draining and removing hosts, and host credentials where they do not belong. */
export const HostMessages = {
  /** DELETE /v1/hosts/:id without ?force=true (409). */
  holdsEnvironments: (host: string, count: number) =>
    `host ${host} holds ${count} environment(s): destroy them first, or pass ?force=true (denv hosts rm ${host} --force) to mark them failed and remove it anyway`,
  /** Placement: every online host of the target is draining. */
  allDraining: (target: string) =>
    `no host in target '${target}' takes new environments: its online hosts are draining; join another with denvd join --url URL --token TOKEN`,
  /** A stream credential that is not (or no longer) a host's: never joined, or the host was removed. */
  credentialInvalid: "host credential is not valid: join again with denvd join",
  /** A host credential sent to a REST route: it opens the host stream only. */
  credentialNotApiToken:
    "a host credential is not an API token: it opens GET /v1/hosts/stream only; send an API token (denv_...)",
  /** GET /v1/hosts?limit= that is not a whole number in range (400). */
  pageLimit: (max: number) => `limit must be a whole number from 1 to ${max}`,
  /** GET /v1/hosts?after= that cannot be a host id (400): it takes the `next` of a page. */
  pageAfter: "after must be a host id: pass the next of the previous page",
} as const;

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

/** Version transfers between hosts (a fork placed where its version is not). */
export const TransferMessages = {
  /** Every attempt failed; what the receiver staged was discarded and nothing was registered there. */
  failed: (version: string, from: string, to: string, why: string) =>
    `the transfer of ${version} from host ${from} to host ${to} failed: ${why}; nothing of it was kept on ${to}`,
  /** A direct connection to a host's transfer listener, refused before any byte of a version. */
  directRefused: (why: string) => `version transfer: direct connection refused: ${why}`,
  directNoTicket: "no ticket",
  directWrongTicket: "the ticket is not one this host was given",
  directUsedTicket: "the ticket was used already",
  directExpiredTicket: "the ticket expired",
  /** A direct receive whose sender never came. */
  directNoSender: (version: string, from: string) =>
    `version transfer: ${from} did not connect with its ticket for ${version} before the ticket expired`,
  directOtherVersion: (version: string, from: string) => `the ticket is not for ${version} from ${from}`,
  /** The control plane does not send a host to an address its connection does not come from. */
  directAddressRefused: (host: string, advertised: string, peer: string) =>
    `host ${host} advertises transfer address ${advertised}, but its connection comes from ${peer}`,
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

/** What denvd refuses before it talks to a control plane. */
export const DenvdMessages = {
  insecureUrl: (url: string) =>
    `refused: ${url} is plain http:// to a machine other than this one, so the join token and the host credential would cross the network unencrypted; use https://, or pass --insecure (DENVD_INSECURE=1) to accept it`,
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

/**
 * `denv import harbor` and `denv export harbor`: what cannot be mapped between a Harbor task
 * folder and a denv project folder. One line naming the file and the key.
 */
export const HarborTaskMessages = {
  missingFile: (file: string) => `${file}: missing; a Harbor task needs it`,
  noEnvironment: (dir: string) =>
    `${dir}/environment: no Dockerfile, no docker-compose.yaml and no [environment] docker_image in task.toml`,
  unsupported: (file: string, key: string, reason: string) => `${file}: '${key}' cannot be mapped: ${reason}`,
  notEmpty: (dir: string) => `${dir} is not empty: write into a new or empty directory`,
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
