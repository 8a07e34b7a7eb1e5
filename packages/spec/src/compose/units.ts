import { numberValue } from "./values.js";

const DURATION_UNITS_MS: Record<string, number> = {
  ns: 1e-6,
  us: 1e-3,
  µs: 1e-3,
  μs: 1e-3,
  ms: 1,
  s: 1000,
  m: 60_000,
  h: 3_600_000,
};
const DURATION_PART = /(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)/y;

/** A compose duration ("1m30s", "500ms", "10s", Go syntax) in milliseconds; undefined if invalid. */
export function parseDuration(value: unknown): number | undefined {
  if (value === 0 || value === "0") return 0;
  if (typeof value !== "string" || value === "") return undefined;
  let total = 0;
  let i = 0;
  while (i < value.length) {
    DURATION_PART.lastIndex = i;
    const m = DURATION_PART.exec(value);
    if (m === null) return undefined;
    total += Number(m[1]) * (DURATION_UNITS_MS[m[2] as string] ?? Number.NaN);
    i += m[0].length;
  }
  return Number.isFinite(total) ? Math.round(total) : undefined;
}

const BYTES = /^(\d+(?:\.\d+)?) ?([kmgtp])?i?b?$/i;
const BYTE_POWERS: Record<string, number> = { k: 1, m: 2, g: 3, t: 4, p: 5 };

/** A compose byte size ("512m", "1g", "1.5GiB", a plain number of bytes), as Docker reads it (1k = 1024). */
export function parseBytes(value: unknown): number | undefined {
  if (typeof value === "number") return Number.isInteger(value) && value >= 0 ? value : undefined;
  if (typeof value !== "string") return undefined;
  const m = BYTES.exec(value.trim());
  if (m === null) return undefined;
  const power = m[2] === undefined ? 0 : (BYTE_POWERS[m[2].toLowerCase()] ?? 0);
  return Math.floor(Number(m[1]) * 1024 ** power);
}

/** A positive whole number (pids, retries, ports), numeric strings included. */
export function parseCount(value: unknown): number | undefined {
  const n = numberValue(value);
  return n !== undefined && Number.isInteger(n) && n >= 0 ? n : undefined;
}
