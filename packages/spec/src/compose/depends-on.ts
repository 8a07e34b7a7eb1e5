import { ComposeNotes, ComposeReasons } from "../messages.js";
import type { DependsOn } from "../plan.js";
import type { Findings, Refuse } from "./findings.js";
import { booleanValue, describe, isExtensionKey, isMapping, scalarString } from "./values.js";

const CONDITIONS = ["service_started", "service_healthy", "service_completed_successfully"] as const;
type Condition = (typeof CONDITIONS)[number];

function isCondition(value: unknown): value is Condition {
  return CONDITIONS.some((c) => c === value);
}

/**
 * `depends_on` of service `name` (a list or a mapping with conditions) among `services`; a
 * missing optional dependency and `restart: true` are notes, not refusals.
 */
export function parseDependsOn(
  name: string,
  value: unknown,
  refuse: Refuse,
  services: ReadonlySet<string>,
  findings: Findings,
): DependsOn[] {
  const key = "depends_on";
  const out: DependsOn[] = [];
  const add = (service: string, condition: Condition, required: boolean) => {
    if (!services.has(service)) {
      if (required) refuse(key, ComposeReasons.undefinedService(service));
      else findings.note(ComposeNotes.optionalDependencyMissing(name, service));
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
          if (booleanValue(v) === true) findings.note(ComposeNotes.dependsOnRestartIgnored(name, service));
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
