import { CliError } from "./exit-codes.js";

/** A task.toml as read: its tables by name ("" for the top), each a mapping of its keys. */
export type Toml = Record<string, Record<string, unknown>>;

/** A small TOML reader: [tables] (dotted names kept as they are) and `key = value` lines. */
export function parseToml(text: string, file: string): Toml {
  const out: Toml = { "": {} };
  let table = "";
  for (const [i, raw] of text.split("\n").entries()) {
    const line = raw.trim();
    if (line === "" || line.startsWith("#")) continue;
    const header = /^\[([A-Za-z0-9_.-]+)\]$/.exec(line);
    if (header) {
      table = header[1] ?? "";
      out[table] ??= {};
      continue;
    }
    const kv = /^([A-Za-z0-9_-]+)\s*=\s*(.+)$/.exec(line);
    if (!kv) throw new CliError("invalid_request", `${file}:${i + 1}: cannot read '${line}'`);
    const [, key = "", value = ""] = kv;
    const target = out[table] ?? {};
    out[table] = target;
    target[key] = tomlValue(value.replace(/\s+#[^"']*$/, "").trim());
  }
  return out;
}

function tomlValue(v: string): unknown {
  if (v === "true" || v === "false") return v === "true";
  if (/^[+-]?\d+(\.\d+)?$/.test(v)) return Number(v);
  if (v.startsWith('"') && v.endsWith('"')) return JSON.parse(v);
  if (v.startsWith("'") && v.endsWith("'")) return v.slice(1, -1);
  if (v.startsWith("[")) {
    try {
      return JSON.parse(v.replace(/'/g, '"'));
    } catch {
      return v;
    }
  }
  return v;
}
