/** Plain YAML values after alias and merge resolution. */
export type Mapping = Record<string, unknown>;

export function isMapping(value: unknown): value is Mapping {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** The kind of a value, for "expected X, got Y" reasons. */
export function describe(value: unknown): string {
  if (value === null || value === undefined) return "nothing";
  if (Array.isArray(value)) return "a list";
  if (typeof value === "string") return `the string "${value}"`;
  if (typeof value === "number") return `the number ${value}`;
  if (typeof value === "boolean") return `${value}`;
  return "a mapping";
}

/** A string, or a number written where compose takes a string (`user: 1000`). */
export function scalarString(value: unknown): string | undefined {
  if (typeof value === "string") return value;
  if (typeof value === "number" && Number.isFinite(value)) return String(value);
  return undefined;
}

/** A boolean; after interpolation, "true" and "false" are booleans too. */
export function booleanValue(value: unknown): boolean | undefined {
  if (typeof value === "boolean") return value;
  if (value === "true") return true;
  if (value === "false") return false;
  return undefined;
}

/** A finite number; after interpolation, numeric strings are numbers too. */
export function numberValue(value: unknown): number | undefined {
  if (typeof value === "number") return Number.isFinite(value) ? value : undefined;
  if (typeof value === "string" && /^\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*$/.test(value))
    return Number(value);
  return undefined;
}

/** A string, or a list of strings (`tmpfs`, `env_file`, `entrypoint`...). */
export function stringOrList(value: unknown): string[] | undefined {
  if (typeof value === "string") return [value];
  return stringList(value);
}

export function stringList(value: unknown): string[] | undefined {
  if (!Array.isArray(value)) return undefined;
  const out: string[] = [];
  for (const item of value) {
    const text = scalarString(item);
    if (text === undefined) return undefined;
    out.push(text);
  }
  return out;
}

/** One entry of a `KEY=VALUE` list or a mapping; `value` undefined for a bare `KEY` or `KEY: null`. */
export interface KeyValue {
  key: string;
  value: string | undefined;
}

/**
 * The list-or-mapping form compose uses for environment, labels and build args:
 * `["A=1", "B"]` or `{A: 1, B: null}`. Undefined when the shape is wrong.
 */
export function keyValues(value: unknown): KeyValue[] | undefined {
  if (Array.isArray(value)) {
    const out: KeyValue[] = [];
    for (const item of value) {
      const text = scalarString(item);
      if (text === undefined) return undefined;
      const eq = text.indexOf("=");
      out.push(
        eq < 0 ? { key: text, value: undefined } : { key: text.slice(0, eq), value: text.slice(eq + 1) },
      );
    }
    return out;
  }
  if (isMapping(value)) {
    const out: KeyValue[] = [];
    for (const [key, item] of Object.entries(value)) {
      if (item === null || item === undefined) out.push({ key, value: undefined });
      else if (typeof item === "boolean") out.push({ key, value: String(item) });
      else {
        const text = scalarString(item);
        if (text === undefined) return undefined;
        out.push({ key, value: text });
      }
    }
    return out;
  }
  return undefined;
}

export function isExtensionKey(key: string): boolean {
  return key.startsWith("x-");
}

/** Sets a key of a record built from user input; a key named `__proto__` stays a plain key. */
export function put<T>(record: Record<string, T>, key: string, value: T): void {
  Object.defineProperty(record, key, { value, enumerable: true, writable: true, configurable: true });
}

/** A value that asks for nothing: null, false, "", [] or {}. A refused key set to it is accepted. */
export function isInert(value: unknown): boolean {
  if (value === null || value === undefined || value === false || value === "") return true;
  if (Array.isArray(value)) return value.length === 0;
  return isMapping(value) && Object.keys(value).length === 0;
}
