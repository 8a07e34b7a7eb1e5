/** Text output for people: aligned columns, as `docker ps` prints them. */
export function table(headers: string[], rows: (string | number | undefined)[][], empty: string): string {
  if (rows.length === 0) return empty;
  const cells = [headers, ...rows.map((r) => r.map((c) => (c === undefined || c === "" ? "-" : String(c))))];
  const widths = headers.map((_, i) => Math.max(...cells.map((r) => (r[i] ?? "").length)));
  return cells
    .map((r) =>
      r
        .map((c, i) => (i === r.length - 1 ? c : c.padEnd((widths[i] ?? 0) + 2)))
        .join("")
        .trimEnd(),
    )
    .join("\n");
}

/** `key  value` lines for one resource. */
export function fields(rows: [string, string | number | boolean | undefined][]): string {
  const width = Math.max(...rows.map(([k]) => k.length)) + 2;
  return rows
    .filter(([, v]) => v !== undefined && v !== "")
    .map(([k, v]) => `${k.padEnd(width)}${String(v)}`)
    .join("\n");
}

/** An ISO time as `2024-05-01 12:00:00` (UTC): readable and sortable. */
export function when(iso: string | undefined): string | undefined {
  return iso === undefined ? undefined : iso.replace("T", " ").replace(/\.\d+Z$|Z$/, "");
}
