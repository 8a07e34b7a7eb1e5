import { parse, TomlError } from "smol-toml";
import { CliError } from "./exit-codes.js";

/**
 * A task.toml as read: its tables by dotted name ("" for the top-level keys, "verifier.env" for
 * `[verifier.env]`), each a mapping of its keys. Parsed by a real TOML parser (smol-toml):
 * inline tables, arrays of tables, multi-line strings and dates read as TOML says.
 */
export type Toml = Record<string, Record<string, unknown>>;

export function parseToml(text: string, file: string): Toml {
  let doc: Record<string, unknown>;
  try {
    doc = parse(text) as Record<string, unknown>;
  } catch (err) {
    if (err instanceof TomlError) {
      const first = err.message.split("\n")[0] ?? "";
      throw new CliError(
        "invalid_request",
        `${file}:${err.line}: ${first.replace(/^Invalid TOML document: /, "")}`,
      );
    }
    throw err;
  }
  const out: Toml = { "": {} };
  const walk = (table: Record<string, unknown>, name: string) => {
    const own: Record<string, unknown> = {};
    for (const [key, value] of Object.entries(table)) {
      if (isTable(value)) walk(value, name === "" ? key : `${name}.${key}`);
      else own[key] = value;
    }
    if (name === "" || Object.keys(own).length > 0 || !(name in out)) out[name] = { ...out[name], ...own };
  };
  walk(doc, "");
  return out;
}

function isTable(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v) && !(v instanceof Date);
}
