import { ComposeReasons } from "../messages.js";
import type { VolumeMount } from "../plan.js";
import type { Refuse } from "./findings.js";
import { parseBytes } from "./units.js";
import { booleanValue, describe, isExtensionKey, isInert, isMapping, scalarString } from "./values.js";

export interface Mounts {
  volumes: VolumeMount[];
  /** tmpfs mounts from long-syntax `type: tmpfs` entries ("target[:size=N]"). */
  tmpfs: string[];
}

const KEY = "volumes";
const SHORT_FORM = "'volume:/path[:ro]' or a mapping with type, source and target";

/**
 * A service's `volumes:`. Only named volumes declared at the top level are accepted: they are
 * what denv can isolate per environment and snapshot. Bind mounts (host paths, the Docker
 * socket) and anonymous volumes are refused, each with its reason.
 */
export function parseServiceVolumes(value: unknown, refuse: Refuse, declared: ReadonlySet<string>): Mounts {
  const out: Mounts = { volumes: [], tmpfs: [] };
  if (!Array.isArray(value)) {
    refuse(KEY, ComposeReasons.expected("a list", describe(value)));
    return out;
  }
  for (const item of value) {
    if (typeof item === "string") shortVolume(item, refuse, declared, out);
    else if (isMapping(item)) longVolume(item, refuse, declared, out);
    else refuse(KEY, ComposeReasons.expected(SHORT_FORM, describe(item)));
  }
  return out;
}

function isHostPath(source: string): boolean {
  return /^(\/|\.|~|\\|[A-Za-z]:[\\/])/.test(source);
}

function refuseHostPath(spec: string, source: string, refuse: Refuse): void {
  refuse(
    KEY,
    /docker\.sock$/.test(source) ? ComposeReasons.dockerSocket(spec) : ComposeReasons.bindMount(spec),
  );
}

function shortVolume(spec: string, refuse: Refuse, declared: ReadonlySet<string>, out: Mounts): void {
  const parts = spec.split(":");
  if (parts.length === 1) {
    refuse(KEY, ComposeReasons.anonymousVolume(spec));
    return;
  }
  if (parts.length > 3) {
    refuse(KEY, ComposeReasons.expected(SHORT_FORM, describe(spec)));
    return;
  }
  const [source = "", target = "", mode = "rw"] = parts;
  if (isHostPath(source)) {
    refuseHostPath(spec, source, refuse);
    return;
  }
  if (source === "") {
    refuse(KEY, ComposeReasons.anonymousVolume(spec));
    return;
  }
  let readOnly = false;
  for (const option of mode.split(",")) {
    if (option === "ro") readOnly = true;
    else if (option !== "rw") {
      refuse(KEY, ComposeReasons.volumeMode(option));
      return;
    }
  }
  addVolume(source, target, readOnly, refuse, declared, out);
}

function addVolume(
  source: string,
  target: string,
  readOnly: boolean,
  refuse: Refuse,
  declared: ReadonlySet<string>,
  out: Mounts,
): void {
  if (!declared.has(source)) {
    refuse(KEY, ComposeReasons.undeclaredVolume(source));
    return;
  }
  if (!target.startsWith("/")) {
    refuse(KEY, ComposeReasons.notAbsolute(target));
    return;
  }
  out.volumes.push({ source, target, readOnly });
}

function longVolume(
  entry: Record<string, unknown>,
  refuse: Refuse,
  declared: ReadonlySet<string>,
  out: Mounts,
): void {
  const type = scalarString(entry.type);
  const source = scalarString(entry.source);
  const target = scalarString(entry.target);
  if (type === undefined) {
    refuse(`${KEY}.type`, ComposeReasons.expected("volume or tmpfs", describe(entry.type)));
    return;
  }
  if (type === "bind") {
    refuseHostPath(source ?? "", source ?? "", refuse);
    return;
  }
  if (type !== "volume" && type !== "tmpfs") {
    refuse(KEY, ComposeReasons.mountType(type));
    return;
  }
  if (target === undefined) {
    refuse(
      `${KEY}.target`,
      ComposeReasons.expected("an absolute path in the container", describe(entry.target)),
    );
    return;
  }
  let readOnly = false;
  let size: number | undefined;
  let ok = true;
  for (const [k, v] of Object.entries(entry)) {
    if (isExtensionKey(k) || k === "type" || k === "source" || k === "target") continue;
    if (k === "read_only") {
      const b = booleanValue(v);
      if (b === undefined) {
        refuse(`${KEY}.read_only`, ComposeReasons.expected("true or false", describe(v)));
        ok = false;
      } else {
        readOnly = b;
      }
    } else if (k === "tmpfs" && type === "tmpfs" && isMapping(v)) {
      for (const [option, optionValue] of Object.entries(v)) {
        if (option === "size") {
          size = parseBytes(optionValue);
          if (size === undefined) {
            refuse(
              `${KEY}.tmpfs.size`,
              ComposeReasons.expected("a size such as '64m'", describe(optionValue)),
            );
            ok = false;
          }
        } else if (!isExtensionKey(option)) {
          refuse(`${KEY}.tmpfs.${option}`, ComposeReasons.volumeOption(option));
          ok = false;
        }
      }
    } else if (k === "volume" && isMapping(v)) {
      for (const [option, optionValue] of Object.entries(v)) {
        if (isExtensionKey(option) || isInert(optionValue)) continue;
        refuse(`${KEY}.volume.${option}`, ComposeReasons.volumeOption(option));
        ok = false;
      }
    } else if (!isInert(v)) {
      refuse(`${KEY}.${k}`, ComposeReasons.unknownKey);
      ok = false;
    }
  }
  if (!ok) return;
  if (type === "tmpfs") {
    if (!target.startsWith("/")) refuse(KEY, ComposeReasons.notAbsolute(target));
    else out.tmpfs.push(size === undefined ? target : `${target}:size=${size}`);
    return;
  }
  if (source === undefined || source === "") {
    refuse(KEY, ComposeReasons.anonymousVolume(target));
    return;
  }
  if (isHostPath(source)) {
    refuseHostPath(source, source, refuse);
    return;
  }
  addVolume(source, target, readOnly, refuse, declared, out);
}
