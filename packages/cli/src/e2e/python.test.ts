import path from "node:path";
import { afterAll, beforeAll, expect, it } from "vitest";
import { repo, run, type Stack, startStack } from "./stack.js";

/**
 * The Python package against a real stack: the conformance suite, Inspect's own self_check with
 * denv as the sandbox, and a real `inspect eval` of a small task with sandbox="denv"
 * (python/tests/integration; scripts/setup-python makes the venv).
 */
let stack: Stack;
beforeAll(async () => {
  stack = await startStack();
}, 180_000);
afterAll(async () => stack?.close(), 180_000);

it("python/tests -m integration passes against a live control plane and denvd", async () => {
  const pytest = path.join(repo, "python/.venv/bin/pytest");
  const r = await run(
    pytest,
    ["python/tests", "-m", "integration", "-q", "-p", "no:cacheprovider", "-rfE", "--durations=12"],
    { ...stack.env, DENV_TEST_URL: stack.url, DENV_TEST_TOKEN: stack.token },
    { timeoutMs: 900_000 },
  ).catch((err: Error) => ({ code: 1, stdout: "", stderr: err.message }));
  // The slowest tests, for the suite's time budget (README, "Duration").
  const slowest = r.stdout.indexOf("slowest 12 durations");
  if (slowest >= 0) console.log(r.stdout.slice(slowest).split("\n\n")[0]);
  expect(r.code, `${r.stdout}\n${r.stderr}`).toBe(0);
  expect(r.stdout).toMatch(/\d+ passed/);
  expect(r.stdout).not.toMatch(/\d+ skipped/);
}, 900_000);
