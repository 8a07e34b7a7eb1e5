import { ComposeReasons } from "../messages.js";
import type { Refuse } from "./findings.js";
import { describe, keyValues, put } from "./values.js";

/**
 * `environment:` as a list of `KEY=VALUE` or a mapping. Values were interpolated with the rest
 * of the file; a bare `KEY` (or `KEY:` with no value) takes the value from `env`, and stays
 * unset in the container when `env` has none (`onUnset` is told, for a note).
 */
export function parseEnvironment(
  value: unknown,
  key: string,
  refuse: Refuse,
  env: Record<string, string | undefined>,
  onUnset: (name: string) => void,
): Record<string, string> | undefined {
  const pairs = keyValues(value);
  if (pairs === undefined) {
    refuse(key, ComposeReasons.expected("a list of KEY=VALUE or a mapping", describe(value)));
    return undefined;
  }
  const out: Record<string, string> = {};
  let ok = true;
  for (const { key: name, value: given } of pairs) {
    if (name === "" || /\s/.test(name)) {
      refuse(key, ComposeReasons.invalidName(name, "a variable name is not empty and has no spaces"));
      ok = false;
      continue;
    }
    const resolved = given ?? env[name];
    if (resolved === undefined) onUnset(name);
    else put(out, name, resolved);
  }
  return ok ? out : undefined;
}
