/** Medians, ratios and the summary table. Targets are printed next to the numbers, never asserted. */

import { mkdir, writeFile } from "node:fs/promises";
import { join } from "node:path";

/** Writes a run's raw numbers to bench/results/<name>-<start time>.json; returns the path. */
export async function writeResults(
  repoRoot: string,
  name: string,
  startedAt: Date,
  out: unknown,
): Promise<string> {
  const dir = join(repoRoot, "bench", "results");
  await mkdir(dir, { recursive: true });
  const file = join(dir, `${name}-${startedAt.toISOString().replace(/[:.]/g, "-")}.json`);
  await writeFile(file, `${JSON.stringify(out, null, 2)}\n`);
  return file;
}

export function median(values: number[]): number {
  if (values.length === 0) return Number.NaN;
  const s = [...values].sort((a, b) => a - b);
  const mid = Math.floor(s.length / 2);
  return s.length % 2 === 1 ? (s[mid] as number) : ((s[mid - 1] as number) + (s[mid] as number)) / 2;
}

export function round(n: number, digits = 1): number {
  const f = 10 ** digits;
  return Math.round(n * f) / f;
}

export type Verdict = "PASS" | "MISS" | "info";

export interface Row {
  /** What was measured. */
  name: string;
  /** denv's median, in `unit`. */
  denv: number;
  /** The baseline's median, in `unit`, measured in the same run (absent for context rows). */
  baseline?: number;
  baselineName?: string;
  unit: "ms" | "µs" | "MB" | "s" | "trials/min";
  /** How the ratio reads: "denv/baseline" (lower is better), "baseline/denv" (a time's
   * speedup) or "throughput" (denv/baseline of a rate: a speedup too). */
  ratioKind?: "denv/baseline" | "baseline/denv" | "throughput";
  ratio?: number;
  target?: string;
  verdict: Verdict;
  note?: string;
}

export function ratioOf(row: Pick<Row, "denv" | "baseline" | "ratioKind">): number | undefined {
  if (row.baseline === undefined || row.ratioKind === undefined) return undefined;
  return row.ratioKind === "baseline/denv" ? row.baseline / row.denv : row.denv / row.baseline;
}

export function verdict(ok: boolean): Verdict {
  return ok ? "PASS" : "MISS";
}

function fmt(n: number | undefined, unit = ""): string {
  if (n === undefined || Number.isNaN(n)) return "-";
  const digits = Math.abs(n) >= 100 ? 0 : 1;
  return `${n.toFixed(digits)}${unit ? ` ${unit}` : ""}`;
}

function fmtRatio(r: number | undefined): string {
  return r === undefined ? "-" : `${r.toFixed(2)}x`;
}

/** A plain-text table; every column padded to its widest cell. */
export function table(rows: Row[]): string {
  const head = ["benchmark", "denv", "baseline (same run)", "ratio", "target", "result"];
  const cells = rows.map((r) => [
    r.name,
    fmt(r.denv, r.unit),
    r.baseline === undefined
      ? "-"
      : `${fmt(r.baseline, r.unit)}${r.baselineName ? ` (${r.baselineName})` : ""}`,
    r.ratio === undefined ? "-" : `${fmtRatio(r.ratio)}${r.ratioKind !== "denv/baseline" ? " speedup" : ""}`,
    r.target ?? "-",
    r.verdict,
  ]);
  const widths = head.map((h, i) => Math.max(h.length, ...cells.map((c) => (c[i] ?? "").length)));
  const line = (c: string[]) => c.map((x, i) => x.padEnd(widths[i] ?? 0)).join("  ");
  const sep = widths.map((w) => "-".repeat(w)).join("  ");
  const notes = rows.filter((r) => r.note).map((r) => `  * ${r.name}: ${r.note}`);
  const legend =
    "ratio: 'speedup' = baseline/denv of a time or denv/baseline of a rate (higher is better); otherwise denv/baseline (lower is better)";
  return [
    line(head),
    sep,
    ...cells.map(line),
    "",
    legend,
    ...(notes.length ? ["", "notes:", ...notes] : []),
  ].join("\n");
}

/** The closing lines both benchmarks print: where the JSON went, noise, cleanup, failure. */
export function printFooter(o: {
  file: string;
  concurrent: { atStart: string[]; atEnd: string[] };
  problems: string[];
  failure: Error | undefined;
}): number {
  console.log(`targets are reported, not asserted. result: ${o.file}`);
  const busy = new Set([...o.concurrent.atStart, ...o.concurrent.atEnd]);
  if (busy.size > 0) {
    console.log(
      `WARNING: ${busy.size} containers of others ran on this engine during the run; numbers may be noisy`,
    );
  }
  if (o.problems.length > 0) console.log(`cleanup problems:\n  ${o.problems.join("\n  ")}`);
  else console.log("cleanup: nothing left behind");
  if (o.failure) console.log(`FAILED: ${o.failure.message}`);
  return o.failure ? 1 : 0;
}
