import path from "node:path";
import { afterAll, beforeAll, expect, it } from "vitest";
import { repo, run, type Stack, startStack } from "./stack.js";

/**
 * The Python package against a real stack: the conformance suite, Inspect's own self_check with
 * denv as the sandbox, and a real `inspect eval` of a small task with sandbox="denv"
 * (python/tests/integration; scripts/setup-python makes the venv).
 */
let stack: Stack;
/**
 * The suite takes ~340 s here; its budget leaves room for a slow machine or package mirror
 * (once its conformance and HUD tests took 11 minutes, and the run hit the old 900 s), and
 * ends before vitest's timeout so that what pytest printed is kept.
 */
const SUITE_MS = 1_200_000;
const SLOW_TEST_S = 300;
beforeAll(async () => {
  stack = await startStack();
}, 180_000);
afterAll(async () => stack?.close(), 180_000);

it(
  "python/tests -m integration passes against a live control plane and denvd",
  async () => {
    const pytest = path.join(repo, "python/.venv/bin/pytest");
    // -v names each test as it ends, so a run killed at its timeout says where it was; a test
    // slower than faulthandler_timeout has every thread's traceback dumped to stderr (printed below).
    const r = await run(
      pytest,
      [
        "python/tests",
        "-m",
        "integration",
        "-v",
        "-p",
        "no:cacheprovider",
        "-rfE",
        "--durations=12",
        "-o",
        `faulthandler_timeout=${SLOW_TEST_S}`,
      ],
      { ...stack.env, DENV_TEST_URL: stack.url, DENV_TEST_TOKEN: stack.token },
      { timeoutMs: SUITE_MS },
    ).catch((err: Error) => ({ code: 1, stdout: "", stderr: err.message }));
    // The slowest tests, for the suite's time budget (README, "Duration").
    const slowest = r.stdout.indexOf("slowest 12 durations");
    if (slowest >= 0) console.log(r.stdout.slice(slowest).split("\n\n")[0]);
    const dump = r.stderr.indexOf("Timeout (");
    if (dump >= 0) console.log(`a test ran past ${SLOW_TEST_S} s:\n${r.stderr.slice(dump, dump + 20_000)}`);
    expect(r.code, `${r.stdout}\n${r.stderr}`).toBe(0);
    expect(r.stdout).toMatch(/\d+ passed/);
    expect(r.stdout).not.toMatch(/\d+ skipped/);
  },
  SUITE_MS + 60_000,
);
