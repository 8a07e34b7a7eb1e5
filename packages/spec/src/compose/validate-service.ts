import { ComposeMessages, ComposeNotes, ComposeReasons } from "../messages.js";
import type { ProjectKind, Resources, ServicePlan } from "../plan.js";
import { parseBuild } from "./build.js";
import type { ComposeContext } from "./compose-context.js";
import { parseDependsOn } from "./depends-on.js";
import { parseDeploy, serviceResources } from "./deploy.js";
import { parseEnvFiles } from "./env-files.js";
import { parseEnvironment } from "./environment.js";
import type { Findings, Refuse } from "./findings.js";
import { parseHealthcheck, parseRestart, parseStopGracePeriod } from "./lifecycle.js";
import { parseServiceVolumes } from "./mounts.js";
import { parseExpose, parsePorts } from "./ports.js";
import { parseCpus, parseMemory, parsePids } from "./resources.js";
import { parseCapDrop, parseSecurityOpt, refuseServiceKey } from "./security.js";
import { parseNetworkMode, parseServiceNetworks } from "./service-networks.js";
import {
  booleanValue,
  describe,
  isExtensionKey,
  isInert,
  keyValues,
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

const ACCEPTED: ReadonlySet<string> = new Set(ACCEPTED_SERVICE_KEYS);

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
        fileEnvironment = parseEnvFiles(value, refuse, ctx, findings);
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
        plan.dependsOn = parseDependsOn(name, value, refuse, scope.services, findings);
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
        const ms = parseStopGracePeriod(value, refuse);
        if (ms !== undefined) plan.stopGracePeriodMs = ms;
        break;
      }
      case "restart":
        parseRestart(value, refuse, plan);
        break;
      case "cap_drop":
        plan.capDrop = parseCapDrop(value, refuse);
        break;
      case "network_mode": {
        const mode = parseNetworkMode(value, refuse);
        if (mode !== undefined) plan.networkMode = mode;
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
      case "security_opt":
        if (parseSecurityOpt(value, refuse)) plan.noNewPrivileges = true;
        break;
      default:
        refuseServiceKey(key, value, refuse);
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
  plan.resources = serviceResources(caps, limits, scope.defaults, refuse);
  const joined = plan.networkMode === "none" ? [] : (networks ?? ["default"]);
  return { plan, networks: joined };
}
