import { ComposeReasons } from "../messages.js";
import type { Resources } from "../plan.js";
import type { Refuse } from "./findings.js";
import { parseBytes, parseCount } from "./units.js";
import { describe, isExtensionKey, isMapping, numberValue } from "./values.js";

const MEMORY = "a memory size such as '512m', '1g' or a number of bytes";
const CPUS = "a positive number of CPUs such as 0.5 or 2";

export function parseMemory(value: unknown, key: string, refuse: Refuse): number | undefined {
  const bytes = parseBytes(value);
  if (bytes === undefined || bytes <= 0) {
    refuse(key, ComposeReasons.expected(MEMORY, describe(value)));
    return undefined;
  }
  return bytes;
}

export function parseCpus(value: unknown, key: string, refuse: Refuse): number | undefined {
  const cpus = numberValue(value);
  if (cpus === undefined || cpus <= 0) {
    refuse(key, ComposeReasons.expected(CPUS, describe(value)));
    return undefined;
  }
  return cpus;
}

export function parsePids(value: unknown, key: string, refuse: Refuse): number | undefined {
  const pids = parseCount(value);
  if (pids === undefined || pids === 0) {
    const n = numberValue(value);
    refuse(
      key,
      n !== undefined && n <= 0
        ? ComposeReasons.uncappedPids
        : ComposeReasons.expected("a positive number", describe(value)),
    );
    return undefined;
  }
  return pids;
}

/**
 * A caps block {memory, cpus, pids} (x-denv.resources, x-denv.verifier.resources,
 * deploy.resources.limits). Only the given fields are returned.
 */
export function parseResourceBlock(value: unknown, key: string, refuse: Refuse): Partial<Resources> {
  if (!isMapping(value)) {
    refuse(key, ComposeReasons.expected("a mapping of memory, cpus and pids", describe(value)));
    return {};
  }
  const out: Partial<Resources> = {};
  for (const [k, v] of Object.entries(value)) {
    if (isExtensionKey(k) || v === null) continue;
    if (k === "memory") out.memoryBytes = parseMemory(v, `${key}.memory`, refuse);
    else if (k === "cpus") out.cpus = parseCpus(v, `${key}.cpus`, refuse);
    else if (k === "pids") out.pids = parsePids(v, `${key}.pids`, refuse);
    else refuse(`${key}.${k}`, ComposeReasons.unknownKey);
  }
  return out;
}

/** Fills the missing caps from `defaults` (protection 4: every container is capped). */
export function withDefaults(given: Partial<Resources>, defaults: Resources): Resources {
  return {
    memoryBytes: given.memoryBytes ?? defaults.memoryBytes,
    cpus: given.cpus ?? defaults.cpus,
    pids: given.pids ?? defaults.pids,
  };
}
