import { ComposeReasons } from "../messages.js";
import type { PortPublish } from "../plan.js";
import type { Refuse } from "./findings.js";
import { describe, isExtensionKey, isMapping, scalarString } from "./values.js";

const MAX_RANGE = 1024;
const PORT_FORM = "'[ip:][published:]target[/protocol]' or a mapping with target";

type Range = { from: number; to: number };

/** "80" or "8000-8010" as a range of valid ports; undefined if invalid. */
function portRange(text: string): Range | undefined {
  const m = /^(\d+)(?:-(\d+))?$/.exec(text);
  if (m === null) return undefined;
  const from = Number(m[1]);
  const to = m[2] === undefined ? from : Number(m[2]);
  if (from < 1 || to > 65535 || to < from) return undefined;
  return { from, to };
}

function protocolOf(text: string | undefined): "tcp" | "udp" | undefined {
  return text === "tcp" || text === "udp" ? text : undefined;
}

function size(r: Range): number {
  return r.to - r.from + 1;
}

/** `expose:` entries ("80", "8000-8010", "53/udp", 80) as ports; the protocol is informational. */
export function parseExpose(value: unknown, refuse: Refuse): number[] {
  if (!Array.isArray(value)) {
    refuse("expose", ComposeReasons.expected("a list of ports", describe(value)));
    return [];
  }
  const out: number[] = [];
  for (const item of value) {
    const text = scalarString(item);
    const [spec = "", protocol = "tcp"] = (text ?? "").split("/");
    const range = portRange(spec);
    if (text === undefined || range === undefined || (protocol !== "tcp" && protocol !== "udp")) {
      refuse("expose", ComposeReasons.expected("a port such as 80, '8000-8010' or '53/udp'", describe(item)));
      continue;
    }
    if (size(range) > MAX_RANGE) {
      refuse("expose", ComposeReasons.rangeTooLarge(spec));
      continue;
    }
    for (let p = range.from; p <= range.to; p += 1) if (!out.includes(p)) out.push(p);
  }
  return out;
}

/** `ports:` of a `service` project, short and long syntax, ranges expanded. */
export function parsePorts(value: unknown, refuse: Refuse): PortPublish[] {
  if (!Array.isArray(value)) {
    refuse("ports", ComposeReasons.expected("a list of ports", describe(value)));
    return [];
  }
  const out: PortPublish[] = [];
  for (const item of value) {
    if (isMapping(item)) longPort(item, refuse, out);
    else if (typeof item === "number" || typeof item === "string") shortPort(String(item), refuse, out);
    else refuse("ports", ComposeReasons.expected(PORT_FORM, describe(item)));
  }
  return out;
}

function shortPort(spec: string, refuse: Refuse, out: PortPublish[]): void {
  const result = shortPortRanges(spec);
  if (typeof result === "string") {
    refuse("ports", result);
    return;
  }
  const { target, published, hostIp, protocol } = result;
  for (let i = 0; i < size(target); i += 1) {
    const port: PortPublish = { target: target.from + i, protocol };
    if (published !== undefined) port.published = published.from + i;
    if (hostIp !== undefined) port.hostIp = hostIp;
    out.push(port);
  }
}

/** "[ip:][published:]target[/protocol]" with ranges, or the reason it is refused. */
function shortPortRanges(
  spec: string,
): { target: Range; published?: Range; hostIp?: string; protocol: "tcp" | "udp" } | string {
  const bad = ComposeReasons.expected(PORT_FORM, describe(spec));
  let rest = spec;
  let protocolText = "tcp";
  const slash = rest.lastIndexOf("/");
  if (slash >= 0) {
    protocolText = rest.slice(slash + 1);
    rest = rest.slice(0, slash);
  }
  const protocol = protocolOf(protocolText);
  let hostIp: string | undefined;
  const v6 = /^\[([^\]]+)\]:(.*)$/.exec(rest);
  if (v6 !== null) {
    hostIp = v6[1];
    rest = v6[2] ?? "";
  }
  const parts = rest.split(":");
  if (v6 === null && parts.length === 3) hostIp = parts.shift();
  if (parts.length > 2 || protocol === undefined || hostIp === "") return bad;
  const target = portRange(parts[parts.length - 1] ?? "");
  const publishedText = parts.length === 2 ? (parts[0] ?? "") : "";
  const published = publishedText === "" ? undefined : portRange(publishedText);
  if (target === undefined || (publishedText !== "" && published === undefined)) return bad;
  if (size(target) > MAX_RANGE) return ComposeReasons.rangeTooLarge(spec);
  if (published !== undefined && size(published) !== size(target)) {
    return ComposeReasons.notSupported(`'${spec}': a published range of another length is`);
  }
  return { target, published, hostIp, protocol };
}

function longPort(entry: Record<string, unknown>, refuse: Refuse, out: PortPublish[]): void {
  const port: PortPublish = { target: 0, protocol: "tcp" };
  let ok = true;
  const bad = (key: string, what: string, got: unknown) => {
    refuse(`ports.${key}`, ComposeReasons.expected(what, describe(got)));
    ok = false;
  };
  for (const [k, v] of Object.entries(entry)) {
    if (isExtensionKey(k)) continue;
    const text = scalarString(v);
    switch (k) {
      case "target": {
        const r = portRange(text ?? "");
        if (r === undefined || size(r) !== 1) bad(k, "a port number", v);
        else port.target = r.from;
        break;
      }
      case "published": {
        const r = portRange(text ?? "");
        if (r === undefined || size(r) !== 1) bad(k, "a port number", v);
        else port.published = r.from;
        break;
      }
      case "host_ip":
        if (text === undefined || text === "") bad(k, "an IP address", v);
        else port.hostIp = text;
        break;
      case "protocol": {
        const protocol = protocolOf(text);
        if (protocol === undefined) bad(k, "tcp or udp", v);
        else port.protocol = protocol;
        break;
      }
      case "mode":
        // "host" is what a single-host container gets anyway.
        if (text !== "host") bad(k, "host", v);
        break;
      case "name":
      case "app_protocol":
        refuse(`ports.${k}`, ComposeReasons.notSupported(`ports.${k} is`));
        ok = false;
        break;
      default:
        refuse(`ports.${k}`, ComposeReasons.unknownKey);
        ok = false;
    }
  }
  if (port.target === 0) {
    if (ok) bad("target", "a port number", entry.target);
    return;
  }
  if (ok) out.push(port);
}
