import { interpolate, type Lookup } from "./interpolate.js";
import { put } from "./values.js";

export type EnvFileResult =
  | { ok: true; values: Record<string, string> }
  | { ok: false; line: number; problem: string };

const KEY = /[A-Za-z_][A-Za-z0-9_.-]*/y;

/**
 * Parses a `.env` file the way Docker Compose does: `KEY=VALUE` (or `KEY: VALUE`) lines, an
 * optional `export ` prefix, `#` comments (inline only after whitespace for unquoted values),
 * single-quoted values taken literally, double-quoted values with `\n \r \t \\ \" \$` escapes,
 * quoted values spanning lines, and interpolation in unquoted and double-quoted values
 * (variables of the file defined above first, then `lookup`). A bare `KEY` takes its value from
 * `lookup` and is left out when that is unset.
 */
export function parseEnvFile(text: string, lookup: Lookup, unset: (name: string) => void): EnvFileResult {
  const values: Record<string, string> = {};
  const scoped: Lookup = (name) => (Object.hasOwn(values, name) ? values[name] : lookup(name));
  const src = text.replace(/\r\n?/g, "\n");
  let i = 0;
  let line = 1;

  const fail = (problem: string): EnvFileResult => ({ ok: false, line, problem });
  const skipBlanks = () => {
    while (i < src.length && (src[i] === " " || src[i] === "\t")) i += 1;
  };
  const restOfLine = (): string => {
    const end = src.indexOf("\n", i);
    const rest = src.slice(i, end < 0 ? src.length : end);
    i = end < 0 ? src.length : end;
    return rest;
  };
  const set = (key: string, raw: string): EnvFileResult | undefined => {
    const result = interpolate(raw, scoped, unset);
    if (!result.ok) return fail(result.reason);
    put(values, key, result.value);
    return undefined;
  };

  while (i < src.length) {
    const c = src[i];
    if (c === "\n") {
      line += 1;
      i += 1;
      continue;
    }
    if (c === " " || c === "\t") {
      i += 1;
      continue;
    }
    if (c === "#") {
      restOfLine();
      continue;
    }
    if (src.startsWith("export", i) && (src[i + 6] === " " || src[i + 6] === "\t")) {
      i += 6;
      skipBlanks();
    }
    KEY.lastIndex = i;
    const key = KEY.exec(src)?.[0];
    if (key === undefined) return fail(`expected a variable name, got "${restOfLine().trim()}"`);
    i += key.length;
    skipBlanks();
    const sep = src[i];
    if (sep === undefined || sep === "\n" || sep === "#") {
      if (sep === "#") restOfLine();
      const value = lookup(key);
      if (value !== undefined) put(values, key, value);
      continue;
    }
    if (sep !== "=" && sep !== ":") return fail(`expected '=' after '${key}'`);
    i += 1;
    const afterSep = i;
    skipBlanks();
    const quote = src[i];
    if (quote === "'" || quote === '"') {
      const startLine = line;
      i += 1;
      let raw = "";
      let closed = false;
      while (i < src.length) {
        const ch = src[i] as string;
        if (ch === "\\" && i + 1 < src.length) {
          const esc = src[i + 1] as string;
          raw += quote === "'" ? (esc === "'" ? "'" : `\\${esc}`) : doubleQuotedEscape(esc);
          if (esc === "\n") line += 1;
          i += 2;
          continue;
        }
        if (ch === quote) {
          closed = true;
          i += 1;
          break;
        }
        if (ch === "\n") line += 1;
        raw += ch;
        i += 1;
      }
      if (!closed) {
        line = startLine;
        return fail(`the value of '${key}' has no closing ${quote === "'" ? "single" : "double"} quote`);
      }
      const trailing = restOfLine().trim();
      if (trailing !== "" && !trailing.startsWith("#"))
        return fail(`unexpected text after the closing quote of '${key}'`);
      if (quote === "'") {
        put(values, key, raw);
      } else {
        const failed = set(key, raw);
        if (failed) return failed;
      }
      continue;
    }
    i = afterSep;
    let raw = restOfLine();
    const comment = raw.search(/[ \t]#/);
    if (comment >= 0) raw = raw.slice(0, comment);
    const failed = set(key, raw.trim());
    if (failed) return failed;
  }
  return { ok: true, values };
}

/** Escapes of double-quoted values; `\$` becomes `$$` so interpolation leaves one literal `$`. */
function doubleQuotedEscape(esc: string): string {
  switch (esc) {
    case "n":
      return "\n";
    case "r":
      return "\r";
    case "t":
      return "\t";
    case "\\":
      return "\\";
    case '"':
      return '"';
    case "$":
      return "$$";
    default:
      return `\\${esc}`;
  }
}
