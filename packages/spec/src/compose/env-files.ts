import { ComposeNotes, ComposeReasons } from "../messages.js";
import type { ComposeContext } from "./compose-context.js";
import { parseEnvFile } from "./env-file.js";
import type { Findings, Refuse } from "./findings.js";
import { projectPath } from "./project-path.js";
import { booleanValue, describe, isExtensionKey, isMapping, put } from "./values.js";

/**
 * A service's `env_file` (a path, a list of paths or of {path, required}): the variables of the
 * files read through `ctx`, later files overriding earlier ones. A missing optional file is skipped.
 */
export function parseEnvFiles(
  value: unknown,
  refuse: Refuse,
  ctx: ComposeContext,
  findings: Findings,
): Record<string, string> {
  const key = "env_file";
  const entries: { path: unknown; required: boolean }[] = [];
  const items = Array.isArray(value) ? value : [value];
  for (const item of items) {
    if (typeof item === "string") {
      entries.push({ path: item, required: true });
    } else if (isMapping(item)) {
      let required = true;
      for (const [k, v] of Object.entries(item)) {
        if (k === "path" || isExtensionKey(k)) continue;
        if (k === "required") {
          const b = booleanValue(v);
          if (b === undefined)
            refuse(`${key}.required`, ComposeReasons.expected("true or false", describe(v)));
          else required = b;
        } else if (k === "format") {
          refuse(`${key}.format`, ComposeReasons.notSupported("env_file format is"));
        } else {
          refuse(`${key}.${k}`, ComposeReasons.unknownKey);
        }
      }
      entries.push({ path: item.path, required });
    } else {
      refuse(key, ComposeReasons.expected("a path, a list of paths or of {path, required}", describe(item)));
    }
  }

  const out: Record<string, string> = {};
  for (const { path, required } of entries) {
    if (typeof path !== "string" || path === "") {
      refuse(`${key}.path`, ComposeReasons.expected("a path in the project", describe(path)));
      continue;
    }
    const rel = projectPath(path);
    if (!rel.ok) {
      refuse(key, rel.reason);
      continue;
    }
    const text = ctx.readFile(rel.path);
    if (text === undefined) {
      if (required) refuse(key, ComposeReasons.notFound(path));
      continue;
    }
    const parsed = parseEnvFile(
      text,
      (name) => ctx.env[name],
      (name) => findings.note(ComposeNotes.variableUnset(name)),
    );
    if (!parsed.ok) {
      refuse(key, ComposeReasons.envFileLine(path, parsed.line, parsed.problem));
      continue;
    }
    for (const [name, v] of Object.entries(parsed.values)) put(out, name, v);
  }
  return out;
}
