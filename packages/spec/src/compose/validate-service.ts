import { ComposeMessages, ComposeNotes, ComposeReasons, RefusedServiceKeys } from "../messages.js";
import type { DependsOn, Healthcheck, ProjectKind, Resources, ServicePlan } from "../plan.js";
import { parseBuild } from "./build.js";
import type { ComposeContext } from "./compose-context.js";
import { parseEnvFile } from "./env-file.js";
import { parseEnvironment } from "./environment.js";
import type { Findings, Refuse } from "./findings.js";
import { parseServiceVolumes } from "./mounts.js";
import { parseExpose, parsePorts } from "./ports.js";
import { projectPath } from "./project-path.js";
import { parseCpus, parseMemory, parsePids, parseResourceBlock, withDefaults } from "./resources.js";
import { parseCount, parseDuration } from "./units.js";
import {
  booleanValue,
  describe,
  isExtensionKey,
  isInert,
  isMapping,
  keyValues,
  numberValue,
  put,
  scalarString,
  stringList,
  stringOrList,
} from "./values.js";

/** Service keys denv accepts and honours (the rest are refused, see RefusedServiceKeys). */
export const ACCEPTED_SERVICE_KEYS = [
  "image",
  "build",
  "command",
  "entrypoint",
  "environment",
  "env_file",
  "working_dir",
  "user",
  "volumes",
  "tmpfs",
  "depends_on",
  "healthcheck",
  "expose",
  "labels",
  "init",
  "stop_grace_period",
  "restart",
  "cap_drop",
  "network_mode",
  "networks",
  "mem_limit",
  "cpus",
  "pids_limit",
  "deploy",
  "hostname",
  "dns_opt",
  "ports",
  "platform",
] as const;

/** Service keys refused with a reason that depends on their value. */
export const VALUE_REFUSED_SERVICE_KEYS = [
  "security_opt",
  "pid",
  "ipc",
  "uts",
  "userns_mode",
  "cgroup",
] as const;

const ACCEPTED: ReadonlySet<string> = new Set(ACCEPTED_SERVICE_KEYS);

const NAMESPACES: Readonly<Record<string, string>> = {
  pid: "PID",
  ipc: "IPC",
  uts: "UTS",
  userns_mode: "user",
  cgroup: "cgroup",
};

/** security_opt values that turn confinement off (as written, or with `=` for `:`). */
const DISABLING_SECURITY_OPTS = new Set([
  "seccomp:unconfined",
  "apparmor:unconfined",
  "label:disable",
  "no-new-privileges:false",
  "systempaths:unconfined",
]);

/** What a service is validated against. */
export interface ServiceScope {
  kind: ProjectKind;
  ctx: ComposeContext;
  findings: Findings;
  /** Named volumes declared at the top level. */
  volumes: ReadonlySet<string>;
  /** Networks declared at the top level, and `default`. */
  networks: ReadonlySet<string>;
  services: ReadonlySet<string>;
  /** Caps for what the service does not give (x-denv.resources, else DefaultCaps). */
  defaults: Resources;
}

export interface ValidatedService {
  /** `image` is "" for a `build:` service without one; the caller derives the tag. */
  plan: ServicePlan;
  /** Compose networks the service joins (all merged onto one; used for a note). */
  networks: string[];
}

const RESOLVER_DEFAULT = ["timeout:1", "attempts:1"];

/** Validates one service. Refusals go to `scope.findings`; every key is looked at. */
export function validateService(
  name: string,
  raw: Record<string, unknown>,
  scope: ServiceScope,
): ValidatedService {
  const { findings, ctx, kind } = scope;
  const refuse: Refuse = (key, reason) => findings.service(name, key, reason);
  const expected = (key: string, what: string, value: unknown) =>
    refuse(key, ComposeReasons.expected(what, describe(value)));

  const plan: ServicePlan = {
    name,
    image: "",
    environment: {},
    volumes: [],
    tmpfs: [],
    dependsOn: [],
    expose: [],
    labels: {},
    capDrop: [],
    aliases: [name],
    resources: scope.defaults,
    ports: [],
    dnsOpt: kind === "rl-environment" ? [...RESOLVER_DEFAULT] : [],
  };
  let fileEnvironment: Record<string, string> = {};
  let environment: Record<string, string> = {};
  let volumeTmpfs: string[] = [];
  let networks: string[] | undefined;
  let hasPorts = false;
  const caps: Partial<Resources> = {};
  let limits: Partial<Resources> = {};

  for (const [key, value] of Object.entries(raw)) {
    if (isExtensionKey(key)) continue;
    // `key:` with no value leaves the key unset, as in Docker Compose.
    if (value === null && ACCEPTED.has(key)) continue;
    switch (key) {
      case "image": {
        const image = scalarString(value);
        if (image === undefined || image === "" || /\s/.test(image)) {
          expected(key, "an image reference such as 'postgres:16'", value);
        } else {
          plan.image = image;
        }
        break;
      }
      case "build": {
        const build = parseBuild(value, key, refuse, ctx);
        if (build !== undefined) plan.build = build;
        break;
      }
      case "command":
      case "entrypoint": {
        const argv = typeof value === "string" ? value : stringList(value);
        if (argv === undefined) expected(key, "a string or a list of strings", value);
        else if (key === "command") plan.command = argv;
        else plan.entrypoint = argv;
        break;
      }
      case "environment":
        environment =
          parseEnvironment(value, key, refuse, ctx.env, (variable) =>
            findings.note(ComposeNotes.environmentUnset(name, variable)),
          ) ?? {};
        break;
      case "env_file":
        fileEnvironment = parseEnvFiles(value, refuse, scope);
        break;
      case "working_dir": {
        const dir = scalarString(value);
        if (dir === undefined || dir === "") expected(key, "an absolute path", value);
        else if (!dir.startsWith("/")) refuse(key, ComposeReasons.notAbsolute(dir));
        else plan.workingDir = dir;
        break;
      }
      case "user": {
        const user = scalarString(value);
        if (user === undefined || user === "" || /\s/.test(user))
          expected(key, "a user name or uid[:gid]", value);
        else plan.user = user;
        break;
      }
      case "volumes": {
        const mounts = parseServiceVolumes(value, refuse, scope.volumes);
        plan.volumes = mounts.volumes;
        volumeTmpfs = mounts.tmpfs;
        break;
      }
      case "tmpfs": {
        const mounts = stringOrList(value);
        if (mounts === undefined) expected(key, "a path or a list of paths", value);
        else {
          for (const mount of mounts) {
            if (!mount.startsWith("/")) refuse(key, ComposeReasons.notAbsolute(mount));
            else plan.tmpfs.push(mount);
          }
        }
        break;
      }
      case "depends_on":
        plan.dependsOn = parseDependsOn(name, value, refuse, scope);
        break;
      case "healthcheck": {
        const healthcheck = parseHealthcheck(value, refuse);
        if (healthcheck !== undefined) plan.healthcheck = healthcheck;
        break;
      }
      case "expose":
        plan.expose = parseExpose(value, refuse);
        break;
      case "labels": {
        const pairs = keyValues(value);
        if (pairs === undefined) {
          expected(key, "a list of KEY=VALUE or a mapping", value);
          break;
        }
        for (const { key: label, value: text } of pairs) {
          if (label.toLowerCase().startsWith("ai.denv.")) refuse(key, ComposeReasons.labelPrefix(label));
          else put(plan.labels, label, text ?? "");
        }
        break;
      }
      case "init": {
        const init = booleanValue(value);
        if (init === undefined) expected(key, "true or false", value);
        else plan.init = init;
        break;
      }
      case "stop_grace_period": {
        const ms = parseDuration(value);
        if (ms === undefined) expected(key, DURATION, value);
        else plan.stopGracePeriodMs = ms;
        break;
      }
      case "restart":
        parseRestart(value, refuse, plan);
        break;
      case "cap_drop": {
        const capabilities = stringList(value);
        if (capabilities === undefined) {
          expected(key, "a list of capabilities", value);
          break;
        }
        for (const capability of capabilities) {
          if (/^[A-Za-z_]+$/.test(capability)) plan.capDrop.push(capability.toUpperCase());
          else expected(key, "a capability name such as NET_RAW or ALL", capability);
        }
        break;
      }
      case "network_mode": {
        const mode = scalarString(value) ?? "";
        const join = /^(service|container):(.+)$/.exec(mode);
        if (mode === "none") plan.networkMode = "none";
        else if (mode === "host") refuse(key, ComposeReasons.networkModeHost);
        else if (join !== null) refuse(key, ComposeReasons.networkModeJoin(join[2] ?? ""));
        else refuse(key, ComposeReasons.networkModeOther(mode));
        break;
      }
      case "networks": {
        const joined = parseServiceNetworks(value, refuse, scope.networks);
        networks = joined.networks;
        for (const alias of joined.aliases) if (!plan.aliases.includes(alias)) plan.aliases.push(alias);
        break;
      }
      case "mem_limit":
        caps.memoryBytes = parseMemory(value, key, refuse);
        break;
      case "cpus":
        caps.cpus = parseCpus(value, key, refuse);
        break;
      case "pids_limit":
        caps.pids = parsePids(value, key, refuse);
        break;
      case "deploy":
        limits = parseDeploy(value, refuse);
        break;
      case "hostname": {
        const hostname = scalarString(value);
        if (hostname === undefined || !/^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$/.test(hostname)) {
          expected(key, "a host name", value);
        } else {
          plan.hostname = hostname;
        }
        break;
      }
      case "dns_opt": {
        const options = stringList(value);
        if (options === undefined || options.some((o) => o === ""))
          expected(key, "a list of resolver options", value);
        else plan.dnsOpt = options;
        break;
      }
      case "ports":
        hasPorts = !isInert(value);
        if (kind === "rl-environment") {
          if (hasPorts) refuse(key, ComposeReasons.portsOnRlEnvironment);
        } else {
          plan.ports = parsePorts(value, refuse);
        }
        break;
      case "platform": {
        const platform = scalarString(value);
        if (platform === undefined || !/^[a-z0-9]+\/[a-z0-9_]+(\/[a-z0-9]+)?$/.test(platform)) {
          expected(key, "a platform such as linux/amd64", value);
        } else {
          plan.platform = platform;
        }
        break;
      }
      case "security_opt": {
        if (isInert(value)) break;
        const options = stringList(value);
        if (options === undefined) {
          expected(key, "a list of options", value);
          break;
        }
        for (const option of options) {
          const normalized = option.toLowerCase().replace("=", ":");
          if (normalized === "no-new-privileges:true" || normalized === "no-new-privileges") {
            plan.noNewPrivileges = true;
            continue;
          }
          refuse(
            key,
            DISABLING_SECURITY_OPTS.has(normalized)
              ? ComposeReasons.securityOptDisables(option)
              : ComposeReasons.securityOptOther(option),
          );
        }
        break;
      }
      default: {
        const namespace = Object.hasOwn(NAMESPACES, key) ? NAMESPACES[key] : undefined;
        if (namespace !== undefined) {
          if (isInert(value)) break;
          const mode = scalarString(value) ?? "";
          const join = /^(service|container):(.+)$/.exec(mode);
          if (mode === "host") refuse(key, ComposeReasons.namespaceHost(namespace));
          else if (join !== null) refuse(key, ComposeReasons.namespaceJoin(namespace, join[2] ?? ""));
          else refuse(key, ComposeReasons.namespaceOther(namespace));
          break;
        }
        const reason = Object.hasOwn(RefusedServiceKeys, key) ? RefusedServiceKeys[key] : undefined;
        if (reason === undefined) refuse(key, ComposeReasons.unknownKey);
        else if (!isInert(value)) refuse(key, reason);
      }
    }
  }

  if ((raw.image ?? null) === null && (raw.build ?? null) === null) {
    findings.refuse(ComposeMessages.serviceMissing(name, "image", "give 'image' or 'build'"));
  }
  plan.environment = { ...fileEnvironment, ...environment };
  plan.tmpfs.push(...volumeTmpfs);
  if (plan.networkMode === "none") {
    if (networks !== undefined && networks.length > 0)
      refuse("networks", ComposeReasons.networksWithoutNetwork);
    if (hasPorts) refuse("ports", ComposeReasons.portsWithoutNetwork);
  }
  const conflicts: [keyof Resources, string, string][] = [
    ["memoryBytes", "mem_limit", "deploy.resources.limits.memory"],
    ["cpus", "cpus", "deploy.resources.limits.cpus"],
    ["pids", "pids_limit", "deploy.resources.limits.pids"],
  ];
  for (const [field, serviceKey, deployKey] of conflicts) {
    const a = caps[field];
    const b = limits[field];
    if (a !== undefined && b !== undefined && a !== b)
      refuse(deployKey, ComposeReasons.conflictingCap(serviceKey, deployKey));
  }
  plan.resources = withDefaults(
    {
      memoryBytes: caps.memoryBytes ?? limits.memoryBytes,
      cpus: caps.cpus ?? limits.cpus,
      pids: caps.pids ?? limits.pids,
    },
    scope.defaults,
  );
  const joined = plan.networkMode === "none" ? [] : (networks ?? ["default"]);
  return { plan, networks: joined };
}

const DURATION = "a duration such as '30s', '1m30s' or '500ms'";

function parseEnvFiles(value: unknown, refuse: Refuse, scope: ServiceScope): Record<string, string> {
  const key = "env_file";
  const entries: { path: unknown; required: boolean }[] = [];
  const items = Array.isArray(value) ? value : [value];
  for (const item of items) {
    if (typeof item === "string") {
      entries.push({ path: item, required: true });
    } else if (isMapping(item)) {
      let required = true;
      for (const [k, v] of Object.entries(item)) {
        if (k === "path" || isExtensionKey(k)) continue;
        if (k === "required") {
          const b = booleanValue(v);
          if (b === undefined)
            refuse(`${key}.required`, ComposeReasons.expected("true or false", describe(v)));
          else required = b;
        } else if (k === "format") {
          refuse(`${key}.format`, ComposeReasons.notSupported("env_file format is"));
        } else {
          refuse(`${key}.${k}`, ComposeReasons.unknownKey);
        }
      }
      entries.push({ path: item.path, required });
    } else {
      refuse(key, ComposeReasons.expected("a path, a list of paths or of {path, required}", describe(item)));
    }
  }

  const out: Record<string, string> = {};
  for (const { path, required } of entries) {
    if (typeof path !== "string" || path === "") {
      refuse(`${key}.path`, ComposeReasons.expected("a path in the project", describe(path)));
      continue;
    }
    const rel = projectPath(path);
    if (!rel.ok) {
      refuse(key, rel.reason);
      continue;
    }
    const text = scope.ctx.readFile(rel.path);
    if (text === undefined) {
      if (required) refuse(key, ComposeReasons.notFound(path));
      continue;
    }
    const parsed = parseEnvFile(
      text,
      (name) => scope.ctx.env[name],
      (name) => scope.findings.note(ComposeNotes.variableUnset(name)),
    );
    if (!parsed.ok) {
      refuse(key, ComposeReasons.envFileLine(path, parsed.line, parsed.problem));
      continue;
    }
    for (const [name, v] of Object.entries(parsed.values)) put(out, name, v);
  }
  return out;
}

const CONDITIONS = ["service_started", "service_healthy", "service_completed_successfully"] as const;
type Condition = (typeof CONDITIONS)[number];

function isCondition(value: unknown): value is Condition {
  return CONDITIONS.some((c) => c === value);
}

function parseDependsOn(name: string, value: unknown, refuse: Refuse, scope: ServiceScope): DependsOn[] {
  const key = "depends_on";
  const out: DependsOn[] = [];
  const add = (service: string, condition: Condition, required: boolean) => {
    if (!scope.services.has(service)) {
      if (required) refuse(key, ComposeReasons.undefinedService(service));
      else scope.findings.note(ComposeNotes.optionalDependencyMissing(name, service));
      return;
    }
    if (!out.some((d) => d.service === service)) out.push({ service, condition });
  };
  if (Array.isArray(value)) {
    for (const item of value) {
      const service = scalarString(item);
      if (service === undefined) refuse(key, ComposeReasons.expected("a service name", describe(item)));
      else add(service, "service_started", true);
    }
    return out;
  }
  if (!isMapping(value)) {
    refuse(key, ComposeReasons.expected("a list of services or a mapping", describe(value)));
    return out;
  }
  for (const [service, spec] of Object.entries(value)) {
    let condition: Condition = "service_started";
    let required = true;
    if (isMapping(spec)) {
      for (const [k, v] of Object.entries(spec)) {
        if (isExtensionKey(k)) continue;
        if (k === "condition") {
          if (isCondition(v)) condition = v;
          else
            refuse(
              `${key}.${service}.condition`,
              ComposeReasons.expected(`one of ${CONDITIONS.join(", ")}`, describe(v)),
            );
        } else if (k === "required") {
          const b = booleanValue(v);
          if (b === undefined)
            refuse(`${key}.${service}.required`, ComposeReasons.expected("true or false", describe(v)));
          else required = b;
        } else if (k === "restart") {
          if (booleanValue(v) === true)
            scope.findings.note(ComposeNotes.dependsOnRestartIgnored(name, service));
        } else {
          refuse(`${key}.${service}.${k}`, ComposeReasons.unknownKey);
        }
      }
    } else if (spec !== null) {
      refuse(`${key}.${service}`, ComposeReasons.expected("a mapping with condition", describe(spec)));
      continue;
    }
    add(service, condition, required);
  }
  return out;
}

function parseHealthcheck(value: unknown, refuse: Refuse): Healthcheck | undefined {
  const key = "healthcheck";
  if (!isMapping(value)) {
    refuse(key, ComposeReasons.expected("a mapping", describe(value)));
    return undefined;
  }
  // An empty test keeps the image's own HEALTHCHECK, with the timings given here.
  const healthcheck: Healthcheck = { test: [] };
  let disable = false;
  const durations: Record<string, "intervalMs" | "timeoutMs" | "startPeriodMs" | "startIntervalMs"> = {
    interval: "intervalMs",
    timeout: "timeoutMs",
    start_period: "startPeriodMs",
    start_interval: "startIntervalMs",
  };
  for (const [k, v] of Object.entries(value)) {
    if (isExtensionKey(k) || v === null) continue;
    const field = Object.hasOwn(durations, k) ? durations[k] : undefined;
    if (field !== undefined) {
      const ms = parseDuration(v);
      if (ms === undefined) refuse(`${key}.${k}`, ComposeReasons.expected(DURATION, describe(v)));
      else healthcheck[field] = ms;
    } else if (k === "test") {
      const test = typeof v === "string" && v !== "" ? ["CMD-SHELL", v] : stringList(v);
      const head = test?.[0];
      const valid =
        test !== undefined &&
        (head === "NONE" ||
          (head === "CMD" && test.length >= 2) ||
          (head === "CMD-SHELL" && test.length === 2 && test[1] !== ""));
      if (!valid) refuse(`${key}.test`, ComposeReasons.healthcheckTest);
      else healthcheck.test = test;
    } else if (k === "retries") {
      const retries = parseCount(v);
      if (retries === undefined)
        refuse(`${key}.retries`, ComposeReasons.expected("a whole number", describe(v)));
      else healthcheck.retries = retries;
    } else if (k === "disable") {
      const b = booleanValue(v);
      if (b === undefined) refuse(`${key}.disable`, ComposeReasons.expected("true or false", describe(v)));
      else disable = b;
    } else {
      refuse(`${key}.${k}`, ComposeReasons.unknownKey);
    }
  }
  if (disable) {
    if (healthcheck.test.length > 0) {
      refuse(`${key}.disable`, ComposeReasons.healthcheckDisabledWithTest);
      return undefined;
    }
    return { test: ["NONE"] };
  }
  return healthcheck;
}

function parseRestart(value: unknown, refuse: Refuse, plan: ServicePlan): void {
  const text = scalarString(value) ?? String(value);
  const retries = /^on-failure:(\d+)$/.exec(text);
  if (text === "no" || text === "always" || text === "on-failure" || text === "unless-stopped") {
    plan.restart = text;
  } else if (retries !== null) {
    plan.restart = "on-failure";
    plan.restartMaxRetries = Number(retries[1]);
  } else {
    refuse("restart", ComposeReasons.restart(text));
  }
}

function parseServiceNetworks(
  value: unknown,
  refuse: Refuse,
  declared: ReadonlySet<string>,
): { networks: string[]; aliases: string[] } {
  const key = "networks";
  const out = { networks: [] as string[], aliases: [] as string[] };
  const join = (network: string) => {
    if (!declared.has(network)) refuse(key, ComposeReasons.undeclaredNetwork(network));
    else out.networks.push(network);
  };
  if (Array.isArray(value)) {
    for (const item of value) {
      const network = scalarString(item);
      if (network === undefined) refuse(key, ComposeReasons.expected("a network name", describe(item)));
      else join(network);
    }
    return out;
  }
  if (!isMapping(value)) {
    refuse(key, ComposeReasons.expected("a list of networks or a mapping", describe(value)));
    return out;
  }
  for (const [network, spec] of Object.entries(value)) {
    join(network);
    if (spec === null) continue;
    if (!isMapping(spec)) {
      refuse(`${key}.${network}`, ComposeReasons.expected("a mapping with aliases", describe(spec)));
      continue;
    }
    for (const [k, v] of Object.entries(spec)) {
      if (isExtensionKey(k) || v === null) continue;
      if (k === "aliases") {
        const aliases = stringList(v);
        if (aliases === undefined)
          refuse(`${key}.${network}.aliases`, ComposeReasons.expected("a list of names", describe(v)));
        else out.aliases.push(...aliases);
      } else if (!isInert(v)) {
        refuse(`${key}.${network}.${k}`, ComposeReasons.networkOption(k));
      }
    }
  }
  return out;
}

function parseDeploy(value: unknown, refuse: Refuse): Partial<Resources> {
  if (!isMapping(value)) {
    refuse("deploy", ComposeReasons.expected("a mapping", describe(value)));
    return {};
  }
  let limits: Partial<Resources> = {};
  for (const [k, v] of Object.entries(value)) {
    if (isExtensionKey(k) || v === null) continue;
    if (k === "resources") {
      if (!isMapping(v)) {
        refuse("deploy.resources", ComposeReasons.expected("a mapping", describe(v)));
        continue;
      }
      for (const [rk, rv] of Object.entries(v)) {
        if (isExtensionKey(rk) || rv === null) continue;
        if (rk === "limits") limits = parseResourceBlock(rv, "deploy.resources.limits", refuse);
        else if (rk === "reservations") {
          if (!isInert(rv)) refuse("deploy.resources.reservations", ComposeReasons.reservations);
        } else refuse(`deploy.resources.${rk}`, ComposeReasons.unknownKey);
      }
    } else if (k === "replicas") {
      if (numberValue(v) !== 1) refuse("deploy.replicas", ComposeReasons.replicas);
    } else if (k === "placement") {
      if (!isInert(v)) refuse("deploy.placement", ComposeReasons.deployPlacement);
    } else if (k === "restart_policy") {
      if (!isInert(v)) refuse("deploy.restart_policy", ComposeReasons.deployRestartPolicy);
    } else if (!isInert(v)) {
      refuse(`deploy.${k}`, ComposeReasons.deployKey);
    }
  }
  return limits;
}
