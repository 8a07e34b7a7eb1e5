import { ComposeReasons } from "../messages.js";
import type { Resources } from "../plan.js";
import type { Refuse } from "./findings.js";
import { parseResourceBlock, withDefaults } from "./resources.js";
import { describe, isExtensionKey, isInert, isMapping, numberValue } from "./values.js";

/** `deploy`: only resources.limits is honoured (returned); other keys are refused unless inert. */
export function parseDeploy(value: unknown, refuse: Refuse): Partial<Resources> {
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

/**
 * A service's caps: its own keys (mem_limit, cpus, pids_limit), else deploy.resources.limits,
 * else `defaults`. The two spellings of one cap may agree, never differ.
 */
export function serviceResources(
  caps: Partial<Resources>,
  limits: Partial<Resources>,
  defaults: Resources,
  refuse: Refuse,
): Resources {
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
  return withDefaults(
    {
      memoryBytes: caps.memoryBytes ?? limits.memoryBytes,
      cpus: caps.cpus ?? limits.cpus,
      pids: caps.pids ?? limits.pids,
    },
    defaults,
  );
}
