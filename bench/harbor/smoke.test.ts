import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { expect, it } from "vitest";

// The benchmark's --smoke pass: one trial per backend on harbor-hello, no warm-up, so the
// benchmark cannot rot. Its numbers are printed, never asserted.
it("bench/harbor --smoke runs to the end and prints every row", async () => {
  const run = fileURLToPath(new URL("./run.mjs", import.meta.url));
  const { stdout } = await promisify(execFile)("node", [run, "--smoke"], { timeout: 1_200_000 });
  for (const row of [
    "harbor-hello: oracle trials/min",
    "harbor-hello: environment setup per trial (median)",
  ]) {
    expect(stdout).toContain(row);
  }
  expect(stdout).not.toContain("not every trial got reward 1.0");
  // Parity: the oracle 1.0 and the do-nothing agent 0.0, on Harbor's docker backend and on denv.
  expect(stdout).toContain("rewards: harbor-hello | 1.0, 0.0 | 1.0, 0.0 | same");
  expect(stdout).toContain("cleanup: nothing left behind");
}, 1_200_000);
