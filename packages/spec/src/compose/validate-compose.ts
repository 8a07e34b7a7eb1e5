import { parseDocument } from "yaml";
import { ComposeMessages, ComposeNotes, ComposeReasons, Refusal } from "../messages.js";
import { Plan, type ServicePlan } from "../plan.js";
import type { ComposeContext } from "./compose-context.js";
import { Findings } from "./findings.js";
import { ImageTags } from "./image-tags.js";
import { interpolateTree, type TreePath } from "./interpolate.js";
import { startOrder } from "./start-order.js";
import { validateService } from "./validate-service.js";
import {
  booleanValue,
  describe,
  isExtensionKey,
  isInert,
  isMapping,
  type Mapping,
  put,
  scalarString,
} from "./values.js";
import { parseVerifier } from "./verifier.js";
import { parseXDenv, resolveAgent } from "./x-denv.js";

export type ValidateResult = { ok: true; plan: Plan; notes: string[] } | { ok: false; refusals: string[] };

const PROJECT_NAME = /^[a-z0-9][a-z0-9_-]*$/;
const PROJECT_NAME_RULE = "lowercase letters, digits, '-' and '_', starting with a letter or a digit";
const RESOURCE_NAME = /^[a-zA-Z0-9][a-zA-Z0-9_.-]*$/;
const RESOURCE_NAME_RULE = "letters, digits, '.', '-' and '_', starting with a letter or a digit";
/** Top-level keys whose values are interpolated; `x-*` fields are only anchors and stay as written. */
const INTERPOLATED_TOP_KEYS = new Set(["name", "services", "volumes", "networks", "x-denv"]);

/**
 * Validates a compose file against the subset denv accepts and returns the normalized plan,
 * or every refusal (one line each, naming the service, the key and the reason). Pure: files
 * and variables come from `ctx`. See docs/reference/compose.md for the full key table.
 */
export function validateCompose(text: string, ctx: ComposeContext): ValidateResult {
  const source = ctx.source ?? "the compose file";
  const findings = new Findings();

  const parsed = parseYaml(text, source, findings);
  if (parsed === undefined) return { ok: false, refusals: findings.refusals };
  if (!isMapping(parsed)) return { ok: false, refusals: [ComposeMessages.notMapping(source)] };

  const root = interpolateRoot(parsed, ctx, findings);

  let name: string | undefined;
  for (const [key, value] of Object.entries(root)) {
    if (isExtensionKey(key) && key !== "x-denv") continue;
    switch (key) {
      case "name": {
        const given = scalarString(value);
        if (given === undefined || !PROJECT_NAME.test(given)) {
          findings.top(key, ComposeReasons.invalidName(given ?? describe(value), PROJECT_NAME_RULE));
        } else {
          name = given;
        }
        break;
      }
      case "version":
        findings.note(ComposeNotes.versionObsolete);
        break;
      case "services":
      case "volumes":
      case "networks":
      case "x-denv":
        break;
      case "secrets":
      case "configs":
        if (!isInert(value)) findings.top(key, ComposeReasons.secretsConfigs);
        break;
      case "include":
        if (!isInert(value)) findings.top(key, ComposeReasons.include);
        break;
      default:
        findings.top(key, ComposeReasons.unknownKey);
    }
  }
  if (name === undefined && !Object.hasOwn(root, "name")) {
    name = defaultProjectName(ctx.projectName);
    if (name === undefined) {
      findings.refuse(
        ComposeMessages.topMissing(
          "name",
          `the folder name '${ctx.projectName}' is not a valid project name`,
        ),
      );
    }
  }

  const volumes = parseTopVolumes(root.volumes, findings);
  const networks = parseTopNetworks(root.networks, findings);
  const x = parseXDenv(root["x-denv"], findings, new Set(volumes));

  // Services.
  const servicesRaw = root.services;
  const services = new Map<string, ServicePlan>();
  const joinedNetworks = new Set<string>();
  if (
    servicesRaw === undefined ||
    servicesRaw === null ||
    (isMapping(servicesRaw) && Object.keys(servicesRaw).length === 0)
  ) {
    findings.refuse(ComposeMessages.noServices(source));
  } else if (!isMapping(servicesRaw)) {
    findings.top("services", ComposeReasons.expected("a mapping of services", describe(servicesRaw)));
  } else {
    const scope = {
      kind: x.kind,
      ctx,
      findings,
      volumes: new Set(volumes),
      networks: new Set(["default", ...networks]),
      services: new Set(Object.keys(servicesRaw)),
      defaults: x.defaults,
    };
    for (const [serviceName, raw] of Object.entries(servicesRaw)) {
      if (!RESOURCE_NAME.test(serviceName)) {
        findings.top(`services.${serviceName}`, ComposeReasons.invalidName(serviceName, RESOURCE_NAME_RULE));
        continue;
      }
      if (!isMapping(raw)) {
        findings.top(`services.${serviceName}`, ComposeReasons.expected("a mapping", describe(raw)));
        continue;
      }
      const result = validateService(serviceName, raw, scope);
      services.set(serviceName, result.plan);
      for (const network of result.networks) joinedNetworks.add(network);
    }
  }

  // Start order; a cycle is refused once, on its first service.
  const names = [...services.keys()];
  const order = startOrder(
    names,
    new Map(names.map((n) => [n, services.get(n)?.dependsOn.map((d) => d.service) ?? []])),
  );
  for (const cycle of order.cycles) {
    findings.service(cycle[0] ?? "", "depends_on", ComposeReasons.dependencyCycle(cycle));
  }

  const agent = services.size > 0 ? resolveAgent(x, services, findings) : undefined;

  const tags = new ImageTags(name ?? "project");
  for (const service of services.values()) if (service.image !== "") tags.reserve(service.image);
  for (const service of order.order.map((n) => services.get(n))) {
    if (service !== undefined && service.image === "") service.image = tags.derive(service.name);
  }
  const verifier =
    x.verifier === undefined
      ? undefined
      : parseVerifier(x.verifier, {
          ctx,
          findings,
          defaults: x.defaults,
          tags,
          agentUser: agent?.sandbox ? undefined : agent?.user,
        });

  if (joinedNetworks.size > 1) findings.note(ComposeNotes.networksMerged([...joinedNetworks]));

  if (findings.refusals.length > 0 || name === undefined || agent === undefined) {
    return { ok: false, refusals: findings.refusals };
  }
  const plan = Plan.parse({
    name,
    kind: x.kind,
    services: order.order.flatMap((n) => services.get(n) ?? []),
    volumes,
    agent,
    verifier,
    egress: x.egress,
    snapshotVolumes: x.snapshotVolumes ?? volumes,
    placement: x.placement,
    disk: x.disk,
    ...(x.pool !== undefined ? { pool: x.pool } : {}),
    notes: findings.notes,
  } satisfies Plan);
  return { ok: true, plan, notes: plan.notes };
}

function parseYaml(text: string, source: string, findings: Findings): unknown {
  const doc = parseDocument(text, { merge: true, prettyErrors: true, logLevel: "error" });
  const error = doc.errors[0];
  if (error !== undefined) {
    const at = error.linePos?.[0];
    const message = error.message.split("\n")[0]?.replace(/ at line \d+, column \d+:?$/, "") ?? error.code;
    findings.refuse(
      ComposeMessages.notYaml(
        source,
        at === undefined ? message : `${message} (line ${at.line}, column ${at.col})`,
      ),
    );
    return undefined;
  }
  for (const warning of doc.warnings)
    findings.note(ComposeNotes.yamlWarning(warning.message.split("\n")[0] ?? ""));
  try {
    // Aliases expand into shared objects; the limit stops a "billion laughs" file.
    return doc.toJS({ maxAliasCount: 1000 });
  } catch (err) {
    findings.refuse(ComposeMessages.notYaml(source, err instanceof Error ? err.message : String(err)));
    return undefined;
  }
}

function interpolateRoot(root: Mapping, ctx: ComposeContext, findings: Findings): Mapping {
  const onError = (path: TreePath, reason: string) => {
    const [top, service, ...rest] = path;
    const line =
      top === "services" && typeof service === "string" && rest.length > 0
        ? Refusal.serviceKey(service, formatPath(rest), reason)
        : Refusal.topKey(formatPath(path), reason);
    findings.uninterpolated(formatPath(path), line);
  };
  const unset = (variable: string) => findings.note(ComposeNotes.variableUnset(variable));
  const out: Mapping = {};
  for (const [key, value] of Object.entries(root)) {
    put(
      out,
      key,
      INTERPOLATED_TOP_KEYS.has(key)
        ? interpolateTree(value, [key], (v) => ctx.env[v], onError, unset)
        : value,
    );
  }
  return out;
}

/** `["command", 1]` -> "command[1]", `["environment", "A"]` -> "environment.A". */
function formatPath(path: TreePath): string {
  let out = "";
  for (const part of path) {
    if (typeof part === "number") out += `[${part}]`;
    else out += out === "" ? part : `.${part}`;
  }
  return out;
}

/** Docker Compose's rule: the folder name, lowercased, without characters a project name cannot have. */
function defaultProjectName(folder: string): string | undefined {
  const name = folder
    .toLowerCase()
    .replace(/[^a-z0-9_-]/g, "")
    .replace(/^[_-]+/, "");
  return name === "" ? undefined : name;
}

function parseTopVolumes(value: unknown, findings: Findings): string[] {
  if (value === undefined || value === null) return [];
  if (!isMapping(value)) {
    findings.top("volumes", ComposeReasons.expected("a mapping of named volumes", describe(value)));
    return [];
  }
  const names: string[] = [];
  for (const [volume, spec] of Object.entries(value)) {
    const at = `volumes.${volume}`;
    if (!RESOURCE_NAME.test(volume)) {
      findings.top(at, ComposeReasons.invalidName(volume, RESOURCE_NAME_RULE));
      continue;
    }
    names.push(volume);
    if (spec === null) continue;
    if (!isMapping(spec)) {
      findings.top(at, ComposeReasons.expected("a mapping", describe(spec)));
      continue;
    }
    for (const [k, v] of Object.entries(spec)) {
      if (isExtensionKey(k) || isInert(v)) continue;
      switch (k) {
        case "driver":
          if (v !== "local")
            findings.top(`${at}.driver`, ComposeReasons.volumeDriver(scalarString(v) ?? describe(v)));
          break;
        case "external":
          findings.top(`${at}.external`, ComposeReasons.externalVolume);
          break;
        case "driver_opts":
          findings.top(`${at}.driver_opts`, ComposeReasons.volumeDriverOpts);
          break;
        case "name":
          findings.top(`${at}.name`, ComposeReasons.volumeName);
          break;
        case "labels":
          findings.top(`${at}.labels`, ComposeReasons.volumeLabels);
          break;
        default:
          findings.top(`${at}.${k}`, ComposeReasons.unknownKey);
      }
    }
  }
  return names;
}

const NETWORK_OPTIONS = new Set([
  "driver_opts",
  "ipam",
  "enable_ipv4",
  "enable_ipv6",
  "attachable",
  "name",
  "labels",
]);

function parseTopNetworks(value: unknown, findings: Findings): string[] {
  if (value === undefined || value === null) return [];
  if (!isMapping(value)) {
    findings.top("networks", ComposeReasons.expected("a mapping of networks", describe(value)));
    return [];
  }
  const names: string[] = [];
  for (const [network, spec] of Object.entries(value)) {
    const at = `networks.${network}`;
    if (!RESOURCE_NAME.test(network)) {
      findings.top(at, ComposeReasons.invalidName(network, RESOURCE_NAME_RULE));
      continue;
    }
    names.push(network);
    if (spec === null) continue;
    if (!isMapping(spec)) {
      findings.top(at, ComposeReasons.expected("a mapping", describe(spec)));
      continue;
    }
    for (const [k, v] of Object.entries(spec)) {
      if (isExtensionKey(k) || v === null) continue;
      if (k === "driver") {
        if (v !== "bridge")
          findings.top(`${at}.driver`, ComposeReasons.networkDriver(scalarString(v) ?? describe(v)));
      } else if (k === "external") {
        if (booleanValue(v) !== false) findings.top(`${at}.external`, ComposeReasons.externalNetwork);
      } else if (k === "internal") {
        if (booleanValue(v) !== true) findings.top(`${at}.internal`, ComposeReasons.networkNotInternal);
      } else if (NETWORK_OPTIONS.has(k)) {
        if (!isInert(v)) findings.top(`${at}.${k}`, ComposeReasons.networkOption(k));
      } else {
        findings.top(`${at}.${k}`, ComposeReasons.unknownKey);
      }
    }
  }
  return names;
}
