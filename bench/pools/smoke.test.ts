import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { expect, it } from "vitest";

// The benchmark's --smoke pass: three sandboxes each way (cold, claimed from the pool) and
// episodes at 1 and 2 in flight, so the benchmark cannot rot. Its numbers are printed, never asserted.
it("bench/pools --smoke runs to the end and prints every row", async () => {
  const run = fileURLToPath(new URL("./run.mjs", import.meta.url));
  const { stdout } = await promisify(execFile)("node", [run, "--smoke"], { timeout: 300_000 });
  for (const row of [
    "sandbox ready: claimed from the pool vs forked cold (median)",
    "episodes per minute at 1 in flight",
    "episodes per minute at 2 in flight",
  ]) {
    expect(stdout).toContain(row);
  }
  expect(stdout).not.toContain("FAILED");
  expect(stdout).toContain("cleanup: nothing left behind");
}, 300_000);
