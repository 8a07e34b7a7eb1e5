import { asRecord } from "./harbor-task.js";

/*
 * Harbor's compose merge, as denv.harbor does it (python/src/denv/harbor/_compose.py, which
 * says what Harbor 0.26.0's docker backend runs): the task's docker-compose.yaml merged over
 * Harbor's base (main built from environment/, its Dockerfile, `sh -c 'sleep infinity'`;
 * task.toml's cpus and memory_mb as main's cpus and mem_limit), Harbor's variables replaced,
 * and what denv cannot use dropped with a note. Both sides are checked against
 * python/tests/harbor_merge/expected-compose.yaml.
 */

/** Harbor's log folders in the container; Harbor may bind them to the trial's host folders. */
const HARBOR_LOG_TARGETS = new Set(["/logs", "/logs/agent", "/logs/verifier", "/logs/artifacts"]);
const REPLACED = new Set(["command", "entrypoint"]);
const KEY_VALUE = new Set(["environment", "labels", "extra_hosts", "sysctls", "annotations"]);
const VARIABLE = /\$\{([A-Za-z_][A-Za-z0-9_]*)[^}]*\}|\$([A-Za-z_][A-Za-z0-9_]*)/g;
const LOG_PATH = "host path of a log folder (denv reads /logs from the sandbox)";
const WHY: Record<string, string> = {
  MAIN_IMAGE_NAME: "tag for main's image (denv names the images it builds)",
  PREBUILT_IMAGE_NAME: "prebuilt image tag (denv uses task.toml's docker_image)",
  CPUS: "CPU count, and task.toml gives no [environment] cpus",
  MEMORY: "memory size, and task.toml gives no [environment] memory_mb",
};
const MISSING = Symbol("missing");

export interface HarborBaseOptions {
  hasDockerfile: boolean;
  dockerImage?: string | undefined;
  cpus?: number | undefined;
  memoryMb?: number | undefined;
}

export interface MergedCompose {
  document: Record<string, unknown>;
  /** What was mapped or dropped, one line each. */
  notes: string[];
}

/** The variables Harbor's docker backend sets for compose; null: none on denv (the entry goes). */
function harborVariables(cpus?: number, memoryMb?: number): Record<string, string | null> {
  const values: Record<string, string | null> = {
    CONTEXT_DIR: ".",
    MAIN_IMAGE_NAME: null,
    PREBUILT_IMAGE_NAME: null,
    CPUS: cpus === undefined ? null : String(cpus),
    MEMORY: memoryMb === undefined ? null : `${memoryMb}M`,
  };
  for (const suffix of ["AGENT_LOGS", "VERIFIER_LOGS", "ARTIFACTS"]) {
    values[`HOST_${suffix}_PATH`] = null;
    values[`ENV_${suffix}_PATH`] = null;
  }
  return values;
}

/** Harbor's compose files under the task's, as denv takes them (see _compose.harbor_base). */
export function harborBase(o: HarborBaseOptions): Record<string, unknown> {
  const main: Record<string, unknown> = {};
  if (o.cpus !== undefined) main.cpus = o.cpus;
  if (o.memoryMb !== undefined) main.mem_limit = `${o.memoryMb}m`;
  // The Dockerfile first when both are given, as Harbor does with --force-build.
  if (o.hasDockerfile) main.build = { context: "." };
  else if (o.dockerImage !== undefined) main.image = o.dockerImage;
  main.command = ["sh", "-c", "sleep infinity"];
  return { services: { main } };
}

export const isMap = (v: unknown): v is Record<string, unknown> =>
  typeof v === "object" && v !== null && !Array.isArray(v);
const same = (a: unknown, b: unknown) => JSON.stringify(a) === JSON.stringify(b);

function keyValues(value: unknown): unknown {
  if (!Array.isArray(value)) return value;
  const out: Record<string, unknown> = {};
  for (const item of value) {
    const text = String(item);
    const at = text.indexOf("=");
    if (at < 0) out[text] = null;
    else out[text.slice(0, at)] = text.slice(at + 1);
  }
  return out;
}

/** A compose value in the one spelling the merge compares (a copy). */
export function normalizeCompose(value: unknown, key = ""): unknown {
  const name = key.split(".").at(-1) ?? "";
  const inService = key.split(".").length === 3 && key.startsWith("services.");
  let v = value;
  if (KEY_VALUE.has(name) || key.endsWith("build.args")) v = keyValues(v);
  else if (inService && name === "depends_on" && Array.isArray(v))
    v = Object.fromEntries(v.map((s) => [String(s), { condition: "service_started" }]));
  else if (inService && name === "networks" && Array.isArray(v))
    v = Object.fromEntries(v.map((n) => [String(n), null]));
  else if (inService && name === "build" && typeof v === "string") v = { context: v };
  if (isMap(v))
    return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, normalizeCompose(x, join(key, k))]));
  if (Array.isArray(v)) return structuredClone(v);
  return v;
}

const join = (key: string, k: string) => (key === "" ? k : `${key}.${k}`);

function target(volume: unknown): string | undefined {
  if (isMap(volume)) {
    if (volume.target === undefined || volume.target === null) return undefined;
    return String(volume.target).replace(/\/+$/, "") || "/";
  }
  const parts = String(volume).split(":");
  return (parts.length === 1 ? parts[0] : parts[1])?.replace(/\/+$/, "") || "/";
}

function isBind(volume: unknown): boolean {
  if (isMap(volume)) return volume.type === "bind";
  const parts = String(volume).split(":");
  return parts.length > 1 && /^[./~$]/.test(parts[0] ?? "");
}

/** `docker compose -f base -f override`: the compose specification's merge rules. */
export function mergeCompose(base: unknown, override: unknown, key = ""): unknown {
  const name = key.split(".").at(-1) ?? "";
  const b = normalizeCompose(base, key);
  const o = normalizeCompose(override, key);
  if (o === null || o === undefined) return b;
  if (REPLACED.has(name) || key.endsWith("healthcheck.test")) return o;
  if (isMap(b) && isMap(o)) {
    const out: Record<string, unknown> = { ...b };
    for (const [k, v] of Object.entries(o)) out[k] = k in b ? mergeCompose(b[k], v, join(key, k)) : v;
    return out;
  }
  if (Array.isArray(b) && Array.isArray(o)) {
    if (name === "volumes" && key.split(".").length === 3) {
      const out = [...b];
      for (const volume of o) {
        const at = out.findIndex((v) => target(v) === target(volume));
        if (at < 0) out.push(volume);
        else out[at] = volume;
      }
      return out;
    }
    return [...b, ...o.filter((v) => !b.some((x) => same(x, v)))];
  }
  return o;
}

function show(value: unknown): string {
  if (isMap(value))
    return `{${Object.entries(value)
      .map(([k, v]) => `${k}: ${String(v)}`)
      .join(", ")}}`;
  return String(value);
}

function substitute(
  value: unknown,
  variables: Record<string, string | null>,
  notes: string[],
  key: string,
): unknown {
  if (isMap(value)) {
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(value)) {
      const sub = substitute(v, variables, notes, join(key, k));
      if (sub !== MISSING) out[k] = sub;
    }
    return out;
  }
  if (Array.isArray(value))
    return value.map((v) => substitute(v, variables, notes, key)).filter((v) => v !== MISSING);
  if (typeof value !== "string") return value;
  const missing: string[] = [];
  // `$$` is a literal dollar in compose: kept as written.
  const text = value
    .split("$$")
    .map((part) =>
      part.replace(VARIABLE, (whole, braced?: string, bare?: string) => {
        const name = braced ?? bare ?? "";
        if (!Object.hasOwn(variables, name)) return whole;
        const found = variables[name];
        if (found === null || found === undefined) {
          missing.push(name);
          return "";
        }
        return found;
      }),
    )
    .join("$$");
  if (missing.length > 0) {
    const first = missing[0] ?? "";
    notes.push(`${key}: ${value} dropped: \${${first}} is Harbor's ${WHY[first] ?? LOG_PATH}`);
    return MISSING;
  }
  return text;
}

/** A task's compose document merged over Harbor's base, mapped into denv's compose subset. */
export function mergeHarborCompose(task: Record<string, unknown>, o: HarborBaseOptions): MergedCompose {
  const notes: string[] = [];
  const substituted = substitute(task, harborVariables(o.cpus, o.memoryMb), notes, "");
  const doc = asRecord(mergeCompose(harborBase(o), isMap(substituted) ? substituted : {}));
  delete doc.name;
  for (const [name, service] of Object.entries(asRecord(doc.services))) {
    if (!isMap(service)) continue;
    if ("pull_policy" in service) {
      notes.push(
        `services.${name}.pull_policy: dropped: denv builds a service with build: and pulls one with image: itself`,
      );
      delete service.pull_policy;
    }
    if (Array.isArray(service.volumes)) {
      const kept = service.volumes.filter((volume) => {
        const harbors = isBind(volume) && HARBOR_LOG_TARGETS.has(target(volume) ?? "");
        if (harbors)
          notes.push(
            `services.${name}.volumes: ${show(volume)} dropped: a host folder for Harbor's logs (denv reads /logs from the sandbox)`,
          );
        return !harbors;
      });
      if (kept.length > 0) service.volumes = kept;
      else delete service.volumes;
    }
  }
  return { document: doc, notes };
}
