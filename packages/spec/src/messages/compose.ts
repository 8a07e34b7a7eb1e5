/**
 * The compose subset's lines: refusals, problems of the file as a whole, and the notes of what
 * denv changed or ignored. Tests assert them verbatim; docs/reference/compose.md lists them.
 */

/** Refusals of the compose subset: one line naming the service, the key and the reason. */
export const Refusal = {
  serviceKey: (service: string, key: string, reason: string) =>
    `service '${service}': '${key}' is refused: ${reason}`,
  topKey: (key: string, reason: string) => `'${key}' is refused: ${reason}`,
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
  agentCapability: (value: string, allowed: readonly string[]) =>
    `'${value}' cannot be added to the agent: a sandboxed agent may add ${allowed.join(" or ")}`,
  agentCapabilitiesUnsandboxed:
    "capabilities are added only inside an agent sandbox, whose kernel is not the host's (protection 1): set x-denv.agent.sandbox: gvisor",
  verifierEgress: (value: string) =>
    `'${value}' is not a verifier egress policy: use deny, or mirrors (the host's package mirrors, through denvd's proxy)`,
  verifierServices: (value: string) =>
    `expected true, or false (the verifier reads the fork's files and needs none of its services), got ${value}`,
  verifierServicesEgress:
    "services: false gives the verifier no network, and egress: mirrors needs it: drop one of them",
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
