import { ComposeReasons } from "../messages.js";
import { isMapping, put } from "./values.js";

/** Looks a variable up; undefined when it is not set (an empty string is set). */
export type Lookup = (name: string) => string | undefined;

export type Interpolated = { ok: true; value: string } | { ok: false; reason: string };

class InterpolationError extends Error {}

const NAME = /[_a-zA-Z][_a-zA-Z0-9]*/y;
const OPERATORS = [":-", ":?", ":+", "-", "?", "+"] as const;

/**
 * Compose interpolation of one string: `$VAR`, `${VAR}`, `${VAR:-default}`, `${VAR-default}`,
 * `${VAR:?error}`, `${VAR?error}`, `${VAR:+replacement}`, `${VAR+replacement}` (nested in
 * defaults), and `$$` for a literal `$`. A `$` that starts none of these is an error, as in
 * Docker Compose. `unset` receives each variable that was not set and became "".
 */
export function interpolate(text: string, lookup: Lookup, unset: (name: string) => void): Interpolated {
  try {
    return { ok: true, value: expand(text, text, lookup, unset) };
  } catch (err) {
    if (err instanceof InterpolationError) return { ok: false, reason: err.message };
    throw err;
  }
}

function expand(text: string, whole: string, lookup: Lookup, unset: (name: string) => void): string {
  let out = "";
  let i = 0;
  while (i < text.length) {
    const dollar = text.indexOf("$", i);
    if (dollar < 0) {
      out += text.slice(i);
      break;
    }
    out += text.slice(i, dollar);
    const next = text[dollar + 1];
    if (next === "$") {
      out += "$";
      i = dollar + 2;
    } else if (next === "{") {
      const end = closingBrace(text, dollar + 2);
      if (end < 0) throw new InterpolationError(ComposeReasons.invalidInterpolation(whole));
      out += braced(text.slice(dollar + 2, end), whole, lookup, unset);
      i = end + 1;
    } else {
      NAME.lastIndex = dollar + 1;
      const name = NAME.exec(text)?.[0];
      if (name === undefined) throw new InterpolationError(ComposeReasons.invalidInterpolation(whole));
      out += plain(name, lookup, unset);
      i = dollar + 1 + name.length;
    }
  }
  return out;
}

/** Index of the `}` closing a `${` whose body starts at `start`, skipping nested `${...}`. */
function closingBrace(text: string, start: number): number {
  let depth = 1;
  let j = start;
  while (j < text.length) {
    const c = text[j];
    if (c === "$" && (text[j + 1] === "$" || text[j + 1] === "{")) {
      if (text[j + 1] === "{") depth += 1;
      j += 2;
      continue;
    }
    if (c === "}") {
      depth -= 1;
      if (depth === 0) return j;
    }
    j += 1;
  }
  return -1;
}

function plain(name: string, lookup: Lookup, unset: (name: string) => void): string {
  const value = lookup(name);
  if (value === undefined) {
    unset(name);
    return "";
  }
  return value;
}

function braced(body: string, whole: string, lookup: Lookup, unset: (name: string) => void): string {
  NAME.lastIndex = 0;
  const name = NAME.exec(body)?.[0];
  if (name === undefined) throw new InterpolationError(ComposeReasons.invalidInterpolation(whole));
  const rest = body.slice(name.length);
  if (rest === "") return plain(name, lookup, unset);
  const op = OPERATORS.find((o) => rest.startsWith(o));
  if (op === undefined) throw new InterpolationError(ComposeReasons.invalidInterpolation(whole));
  // The argument is expanded only when it is used, as a shell does.
  const arg = () => expand(rest.slice(op.length), whole, lookup, unset);
  const value = lookup(name);
  const unsetOrEmpty = value === undefined || value === "";
  switch (op) {
    case ":-":
      return unsetOrEmpty ? arg() : value;
    case "-":
      return value === undefined ? arg() : value;
    case ":?":
      if (unsetOrEmpty) throw new InterpolationError(ComposeReasons.requiredVariable(name, arg()));
      return value;
    case "?":
      if (value === undefined) throw new InterpolationError(ComposeReasons.requiredVariable(name, arg()));
      return value;
    case ":+":
      return unsetOrEmpty ? "" : arg();
    case "+":
      return value === undefined ? "" : arg();
  }
}

/** A position in the YAML tree: mapping keys and list indexes. */
export type TreePath = readonly (string | number)[];

/**
 * Interpolates every string of a YAML value and returns a new tree. It never mutates: YAML
 * aliases share objects, and expanding a shared string twice would unescape `$$` twice.
 */
export function interpolateTree(
  value: unknown,
  path: TreePath,
  lookup: Lookup,
  onError: (path: TreePath, reason: string) => void,
  unset: (name: string) => void,
): unknown {
  if (typeof value === "string") {
    const result = interpolate(value, lookup, unset);
    if (result.ok) return result.value;
    onError(path, result.reason);
    return value;
  }
  if (Array.isArray(value)) {
    return value.map((item, index) => interpolateTree(item, [...path, index], lookup, onError, unset));
  }
  if (isMapping(value)) {
    const out: Record<string, unknown> = {};
    for (const [key, item] of Object.entries(value)) {
      put(out, key, interpolateTree(item, [...path, key], lookup, onError, unset));
    }
    return out;
  }
  return value;
}
