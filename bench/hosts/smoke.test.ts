import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { expect, it } from "vitest";

// The benchmark's --smoke pass: a 20 MB version moved between two hosts of the hosts fixture, and
// a thousand placement decisions, so the benchmark cannot rot. Its numbers are printed, never asserted.
it("bench/hosts --smoke runs to the end and prints every row", async () => {
  const run = fileURLToPath(new URL("./run.mjs", import.meta.url));
  const { stdout } = await promisify(execFile)("node", [run, "--smoke"], { timeout: 300_000 });
  for (const row of [
    "version transfer a -> b",
    "fork needing a transfer vs a local fork on the holder",
    "placement choose() p50 (1000 hosts)",
    "placement choose() p99 (1000 hosts)",
    "Placer.place() p50 (1000 hosts",
    "Placer.place() p99 (1000 hosts",
  ]) {
    expect(stdout).toContain(row);
  }
  expect(stdout).not.toContain("FAILED");
  expect(stdout).toContain("cleanup: nothing left behind");
}, 300_000);
