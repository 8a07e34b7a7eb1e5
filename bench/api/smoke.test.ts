import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { expect, it } from "vitest";

// The benchmark's --smoke pass: a few samples of each measurement and 10 simulated hosts, so the
// benchmark cannot rot. Its numbers are printed, never asserted.
it("bench/api --smoke runs to the end and prints every row", async () => {
  const run = fileURLToPath(new URL("./run.mjs", import.meta.url));
  const { stdout } = await promisify(execFile)("node", [run, "--smoke"], { timeout: 300_000 });
  for (const row of [
    "exec `true` round trip",
    "fork-to-ready via the API",
    "cp read mix p50",
    "cp read mix p99",
    "GET /v1/hosts p99",
    "GET /v1/projects/:p/environments p99",
    "GET /v1/environments/:p/:e p99",
    "GET /v1/deployments/:id p99",
    "cp RSS",
  ]) {
    expect(stdout).toContain(row);
  }
  expect(stdout).toContain("cleanup: nothing left behind");
}, 300_000);
