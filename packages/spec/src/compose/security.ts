import { ComposeReasons, RefusedServiceKeys } from "../messages.js";
import type { Refuse } from "./findings.js";
import { describe, isInert, scalarString, stringList } from "./values.js";

/** Service keys refused with a reason that depends on their value. */
export const VALUE_REFUSED_SERVICE_KEYS = [
  "security_opt",
  "pid",
  "ipc",
  "uts",
  "userns_mode",
  "cgroup",
] as const;

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

/** `cap_drop`: the capabilities, upper-cased; a name that is not one is refused. */
export function parseCapDrop(value: unknown, refuse: Refuse): string[] {
  const key = "cap_drop";
  const out: string[] = [];
  const capabilities = stringList(value);
  if (capabilities === undefined) {
    refuse(key, ComposeReasons.expected("a list of capabilities", describe(value)));
    return out;
  }
  for (const capability of capabilities) {
    if (/^[A-Za-z_]+$/.test(capability)) out.push(capability.toUpperCase());
    else
      refuse(key, ComposeReasons.expected("a capability name such as NET_RAW or ALL", describe(capability)));
  }
  return out;
}

/**
 * `security_opt`: true when it asks for no-new-privileges (which denv sets anyway); every other
 * option is refused, naming the ones that turn confinement off.
 */
export function parseSecurityOpt(value: unknown, refuse: Refuse): boolean {
  const key = "security_opt";
  if (isInert(value)) return false;
  const options = stringList(value);
  if (options === undefined) {
    refuse(key, ComposeReasons.expected("a list of options", describe(value)));
    return false;
  }
  let noNewPrivileges = false;
  for (const option of options) {
    const normalized = option.toLowerCase().replace("=", ":");
    if (normalized === "no-new-privileges:true" || normalized === "no-new-privileges") {
      noNewPrivileges = true;
      continue;
    }
    refuse(
      key,
      DISABLING_SECURITY_OPTS.has(normalized)
        ? ComposeReasons.securityOptDisables(option)
        : ComposeReasons.securityOptOther(option),
    );
  }
  return noNewPrivileges;
}

/**
 * A service key denv does not accept: a namespace key (pid, ipc...) is refused unless inert, with
 * a reason for its mode; a key of RefusedServiceKeys unless inert; any other key as unknown.
 */
export function refuseServiceKey(key: string, value: unknown, refuse: Refuse): void {
  const namespace = Object.hasOwn(NAMESPACES, key) ? NAMESPACES[key] : undefined;
  if (namespace !== undefined) {
    if (isInert(value)) return;
    const mode = scalarString(value) ?? "";
    const join = /^(service|container):(.+)$/.exec(mode);
    if (mode === "host") refuse(key, ComposeReasons.namespaceHost(namespace));
    else if (join !== null) refuse(key, ComposeReasons.namespaceJoin(namespace, join[2] ?? ""));
    else refuse(key, ComposeReasons.namespaceOther(namespace));
    return;
  }
  const reason = Object.hasOwn(RefusedServiceKeys, key) ? RefusedServiceKeys[key] : undefined;
  if (reason === undefined) refuse(key, ComposeReasons.unknownKey);
  else if (!isInert(value)) refuse(key, reason);
}
