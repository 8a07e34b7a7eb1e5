import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { expect, it } from "vitest";

// The benchmark's --smoke pass: one small run of each measurement, so the benchmark cannot rot.
// Its numbers are printed, never asserted.
it("bench/runtime --smoke runs to the end and prints every row", async () => {
  const run = fileURLToPath(new URL("./run.mjs", import.meta.url));
  const { stdout } = await promisify(execFile)("node", [run, "--smoke"], { timeout: 300_000 });
  for (const row of ["snapshot", "fork", "exec", "RSS"]) expect(stdout).toContain(row);
}, 300_000);
