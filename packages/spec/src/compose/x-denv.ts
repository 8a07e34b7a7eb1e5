import {
  ComposeMessages,
  ComposeReasons,
  DefaultCaps,
  DefaultDiskBytes,
  MAX_POOL_SIZE,
} from "../messages.js";
import {
  type AgentPlan,
  type AgentSandbox,
  type DiskCaps,
  type ProjectKind,
  type Resources,
  SandboxCapability,
  type ServicePlan,
} from "../plan.js";
import { isRootUser } from "../users.js";
import type { Findings, Refuse } from "./findings.js";
import { parseResourceBlock, withDefaults } from "./resources.js";
import { parseBytes } from "./units.js";
import { describe, isExtensionKey, isMapping, put, scalarString, stringList } from "./values.js";

/** The x-denv block, read before the services (kind and caps apply to them). */
export interface XDenv {
  kind: ProjectKind;
  egress: "deny" | "mirrors" | "allow";
  /** Caps of services and of the verifier where they give none. */
  defaults: Resources;
  agent: {
    service?: string;
    user?: string;
    workdir?: string;
    sandbox?: AgentSandbox;
    capabilities?: SandboxCapability[];
  };
  /** Parsed by parseVerifier once the agent is known. */
  verifier?: unknown;
  /** Undefined: every named volume. */
  snapshotVolumes?: string[];
  placement: Record<string, string>;
  disk: DiskCaps;
  /** Warm forks kept ready for sandbox claims (x-denv.pool); undefined: none asked for. */
  pool?: number;
}

export const X_DENV_KEYS = [
  "kind",
  "agent",
  "verifier",
  "egress",
  "resources",
  "snapshot",
  "placement",
  "disk",
  "pool",
] as const;

const AGENT_DEFAULT_USER = "1000";
const AGENT_DEFAULT_WORKDIR = "/workspace";

export function parseXDenv(raw: unknown, findings: Findings, volumes: ReadonlySet<string>): XDenv {
  const x: XDenv = {
    kind: "rl-environment",
    egress: "deny",
    defaults: { ...DefaultCaps },
    agent: {},
    placement: {},
    disk: { volumeBytes: DefaultDiskBytes, layerBytes: DefaultDiskBytes, explicit: [] },
  };
  if (raw === undefined || raw === null) return x;
  const refuse: Refuse = (key, reason) => findings.top(`x-denv${key === "" ? "" : `.${key}`}`, reason);
  if (!isMapping(raw)) {
    refuse("", ComposeReasons.expected("a mapping", describe(raw)));
    return x;
  }
  // Kind first: the other keys are judged by it.
  const kind = raw.kind;
  if (kind !== undefined && kind !== null) {
    if (kind === "rl-environment" || kind === "service") x.kind = kind;
    else refuse("kind", ComposeReasons.kind(scalarString(kind) ?? describe(kind)));
  }
  for (const [key, value] of Object.entries(raw)) {
    if (isExtensionKey(key) || key === "kind" || value === null) continue;
    switch (key) {
      case "egress":
        if (value === "deny" || value === "mirrors") x.egress = value;
        else if (value !== "allow")
          refuse(key, ComposeReasons.egress(scalarString(value) ?? describe(value)));
        else if (x.kind === "rl-environment") refuse(key, ComposeReasons.egressAllowOnRlEnvironment);
        else x.egress = "allow";
        break;
      case "resources":
        x.defaults = withDefaults(parseResourceBlock(value, "resources", refuse), DefaultCaps);
        break;
      case "agent":
        x.agent = parseAgent(value, refuse, x.kind);
        break;
      case "verifier":
        x.verifier = value;
        break;
      case "snapshot":
        parseSnapshot(value, refuse, volumes, x);
        break;
      case "disk":
        x.disk = parseDisk(value, refuse);
        break;
      case "placement":
        if (!isMapping(value)) {
          refuse(key, ComposeReasons.expected("a mapping of labels", describe(value)));
          break;
        }
        for (const [label, v] of Object.entries(value)) {
          const text = typeof v === "boolean" ? String(v) : scalarString(v);
          if (text === undefined)
            refuse(`placement.${label}`, ComposeReasons.expected("a label value", describe(v)));
          else put(x.placement, label, text);
        }
        break;
      case "pool":
        if (typeof value === "number" && Number.isInteger(value) && value >= 0 && value <= MAX_POOL_SIZE)
          x.pool = value;
        else
          refuse(
            key,
            ComposeReasons.expected(`a whole number of forks from 0 to ${MAX_POOL_SIZE}`, describe(value)),
          );
        break;
      default:
        refuse(key, ComposeReasons.unknownKey);
    }
  }
  return x;
}

function parseAgent(value: unknown, refuse: Refuse, kind: ProjectKind): XDenv["agent"] {
  if (typeof value === "string") return { service: value };
  if (!isMapping(value)) {
    refuse(
      "agent",
      ComposeReasons.expected(
        "a service name or a mapping with service, user, workdir, sandbox and capabilities",
        describe(value),
      ),
    );
    return {};
  }
  const agent: XDenv["agent"] = {};
  for (const [k, v] of Object.entries(value)) {
    if (isExtensionKey(k) || v === null) continue;
    const text = scalarString(v);
    if (k === "service") {
      if (text === undefined || text === "")
        refuse("agent.service", ComposeReasons.expected("a service name", describe(v)));
      else agent.service = text;
    } else if (k === "user") {
      if (text === undefined || text === "" || /\s/.test(text)) {
        refuse("agent.user", ComposeReasons.expected("a user name or uid[:gid]", describe(v)));
      } else {
        // Root is judged once every key is read: x-denv.agent.sandbox may confine it.
        agent.user = text;
      }
    } else if (k === "sandbox") {
      if (text === "gvisor") agent.sandbox = text;
      else refuse("agent.sandbox", ComposeReasons.agentSandbox(text ?? describe(v)));
    } else if (k === "capabilities") {
      const caps = stringList(v);
      if (caps === undefined) {
        refuse("agent.capabilities", ComposeReasons.expected("a list of capabilities", describe(v)));
        continue;
      }
      agent.capabilities = [];
      for (const cap of caps) {
        // Spelled as compose's cap_add spells them, with or without CAP_.
        const name = SandboxCapability.safeParse(cap.toUpperCase().replace(/^CAP_/, ""));
        if (!name.success)
          refuse("agent.capabilities", ComposeReasons.agentCapability(cap, SandboxCapability.options));
        else if (!agent.capabilities.includes(name.data)) agent.capabilities.push(name.data);
      }
    } else if (k === "workdir") {
      if (text === undefined || text === "")
        refuse("agent.workdir", ComposeReasons.expected("an absolute path", describe(v)));
      else if (!text.startsWith("/")) refuse("agent.workdir", ComposeReasons.notAbsolute(text));
      else agent.workdir = text;
    } else {
      refuse(`agent.${k}`, ComposeReasons.unknownKey);
    }
  }
  if (kind === "rl-environment" && agent.user !== undefined && isRootUser(agent.user) && !agent.sandbox) {
    refuse("agent.user", ComposeReasons.agentRoot);
    delete agent.user;
  }
  if (agent.capabilities !== undefined && !agent.sandbox) {
    refuse("agent.capabilities", ComposeReasons.agentCapabilitiesUnsandboxed);
    delete agent.capabilities;
  }
  return agent;
}

function parseSnapshot(value: unknown, refuse: Refuse, volumes: ReadonlySet<string>, x: XDenv): void {
  if (!isMapping(value)) {
    refuse("snapshot", ComposeReasons.expected("a mapping with volumes", describe(value)));
    return;
  }
  for (const [k, v] of Object.entries(value)) {
    if (isExtensionKey(k)) continue;
    if (k !== "volumes") {
      refuse(`snapshot.${k}`, ComposeReasons.unknownKey);
      continue;
    }
    const names = v === null ? [] : stringList(v);
    if (names === undefined) {
      refuse("snapshot.volumes", ComposeReasons.expected("a list of volume names", describe(v)));
      continue;
    }
    x.snapshotVolumes = [];
    for (const name of names) {
      if (!volumes.has(name)) refuse("snapshot.volumes", ComposeReasons.undeclaredSnapshotVolume(name));
      else if (!x.snapshotVolumes.includes(name)) x.snapshotVolumes.push(name);
    }
  }
}

/**
 * The agent: x-denv.agent, else the only service, else `main`, else `default`. Its user is
 * x-denv.agent.user, else the service's non-root `user:`, else uid 1000 (the validator cannot
 * see the image; the runtime may refine). Its workdir is x-denv.agent.workdir, else the
 * service's working_dir, else /workspace.
 */
export function resolveAgent(
  x: XDenv,
  services: ReadonlyMap<string, ServicePlan>,
  findings: Findings,
): AgentPlan | undefined {
  const names = [...services.keys()];
  let name = x.agent.service;
  if (name === undefined) {
    name = names.length === 1 ? names[0] : ["main", "default"].find((n) => services.has(n));
    if (name === undefined) {
      findings.refuse(ComposeMessages.agentNeeded(names));
      return undefined;
    }
  }
  const service = services.get(name);
  if (service === undefined) {
    findings.top("x-denv.agent", ComposeReasons.undefinedService(name));
    return undefined;
  }
  const serviceUser = service.user !== undefined && !isRootUser(service.user) ? service.user : undefined;
  return {
    service: name,
    user: x.agent.user ?? serviceUser ?? AGENT_DEFAULT_USER,
    workdir: x.agent.workdir ?? service.workingDir ?? AGENT_DEFAULT_WORKDIR,
    ...(x.agent.sandbox ? { sandbox: x.agent.sandbox } : {}),
    ...(x.agent.capabilities?.length ? { capabilities: x.agent.capabilities } : {}),
  };
}

const DISK = "a size such as '10g', or a mapping of volumes and layers sizes";

/** x-denv.disk: one size for volumes and writable layers, or {volumes, layers}. */
function parseDisk(value: unknown, refuse: Refuse): DiskCaps {
  const disk: DiskCaps = { volumeBytes: DefaultDiskBytes, layerBytes: DefaultDiskBytes, explicit: [] };
  const size = (v: unknown, key: string): number | undefined => {
    const bytes = parseBytes(v);
    if (bytes === undefined || bytes <= 0) {
      refuse(key, ComposeReasons.expected("a size such as '512m' or '10g'", describe(v)));
      return undefined;
    }
    return bytes;
  };
  if (!isMapping(value)) {
    const bytes = parseBytes(value);
    if (bytes === undefined || bytes <= 0) {
      refuse("disk", ComposeReasons.expected(DISK, describe(value)));
      return disk;
    }
    return { volumeBytes: bytes, layerBytes: bytes, explicit: ["volumes", "layers"] };
  }
  for (const [k, v] of Object.entries(value)) {
    if (isExtensionKey(k) || v === null) continue;
    if (k === "volumes") {
      const bytes = size(v, "disk.volumes");
      if (bytes !== undefined) {
        disk.volumeBytes = bytes;
        disk.explicit.push("volumes");
      }
    } else if (k === "layers") {
      const bytes = size(v, "disk.layers");
      if (bytes !== undefined) {
        disk.layerBytes = bytes;
        disk.explicit.push("layers");
      }
    } else refuse(`disk.${k}`, ComposeReasons.unknownKey);
  }
  return disk;
}
