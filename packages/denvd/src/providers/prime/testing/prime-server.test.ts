import { execFile, execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type PrimeDouble, startPrimeDouble } from "./prime-double.js";

/**
 * The Prime double driven by the official Python SDK (prime-sandboxes 0.5.1, in the venv
 * scripts/setup-python makes), nothing mocked: sandboxes are containers of
 * debian:bookworm-slim on this machine's engine (local; never pulled), and of an image the flow
 * builds through Prime's image API (a docker build on the same engine). The SDK reaches only the
 * double: its base URL and key come from the environment, which holds nothing else of Prime's.
 */
const here = dirname(fileURLToPath(import.meta.url));
const python = resolve(here, "../../../../../../python/.prime/.venv/bin/python");
const docker = (...args: string[]) => execFileSync("docker", args, { encoding: "utf8" }).trim();

let double: PrimeDouble;
let home: string;

beforeAll(async () => {
  if (!existsSync(python)) throw new Error(`${python} is missing: run scripts/setup-python`);
  home = await mkdtemp(join(tmpdir(), "denv-prime-sdk-"));
  double = await startPrimeDouble();
}, 60_000);

afterAll(async () => {
  try {
    await double?.close();
  } finally {
    await rm(home, { recursive: true, force: true });
  }
  expect(double.leftovers()).toEqual([]);
  expect(docker("ps", "-a", "-q", "--filter", "label=ai.denv.test=prime-server")).toBe("");
  expect(docker("images", "-q", "--filter", "label=ai.denv.test=prime-server")).toBe("");
}, 60_000);

/** Runs the SDK flow script; its stdout is one JSON object of what it saw. */
function runFlow(): Promise<Record<string, unknown>> {
  const env = {
    PATH: process.env.PATH ?? "/usr/bin:/bin",
    HOME: home,
    ...double.sdkEnv,
  };
  return new Promise((resolveFlow, reject) => {
    execFile(
      python,
      [join(here, "prime_sdk_flow.py")],
      { env, timeout: 150_000, maxBuffer: 1 << 20 },
      (err, stdout, stderr) => {
        if (err) reject(new Error(`prime_sdk_flow.py failed: ${err.message}\n${stderr}`));
        else resolveFlow(JSON.parse(stdout) as Record<string, unknown>);
      },
    );
  });
}

describe("PrimeServer with the prime-sandboxes SDK", { timeout: 180_000 }, () => {
  it("creates, runs commands as a user, moves files, checkpoints and restores, shuts egress, builds an image, refuses a wrong key", async () => {
    const seen = await runFlow();
    expect(seen).toMatchObject({
      created_status: "PENDING",
      status: "RUNNING",
      listed_other_label: 0,
      exec: { stdout: "out\n", stderr: "err\n", exit_code: 3 },
      exec_as_nobody: "sandbox-wide per-call /tmp nobody",
      exec_as_root: "0",
      timeout: "CommandTimeoutError",
      upload: 21,
      download_matches: true,
      read_file: 21,
      read_missing: "SandboxFileNotFoundError",
      live: { echo: "got ping\n", killed: 137 },
      checkpoint_state: "PENDING",
      checkpoint_durable: "DURABLE",
      checkpoints_listed: true,
      restored_image: "debian:bookworm-slim",
      restored_file: "checkpointed",
      closed_allowlist: [],
      probe_open: "reached",
      probe_closed: "blocked",
      egress_closed: [],
      deleted_status: "TERMINATED",
      checkpoint_deleted: true,
      wrong_key: "UnauthorizedError",
    });
    // The SDK's image flow: a PENDING build that COMPLETEs (BUILDING unless a poll missed it);
    // a sandbox of it runs.
    const ref = `${double.server.userId}/flow-image:v1`;
    const { statuses, ...image } = seen.image as { statuses: string[] };
    expect(["PENDING,BUILDING,COMPLETED", "PENDING,COMPLETED"]).toContain(statuses.join());
    expect(image).toEqual({
      wrong_type: 403,
      listed: [[ref, "COMPLETED"]],
      ref,
      ran: "built through the image API\n1000\n",
    });
    expect(seen.listed).toHaveLength(1);
    expect(String(seen.delete_tip)).toMatch(/HTTP 409: .*active tip/);
    expect((seen.live as { pid: number }).pid).toBeGreaterThan(0);
    // Every call went to the double's API, and the gateway served the commands and files.
    expect(double.server.requests).toContain("POST /api/v1/sandbox/status:batchGet");
    expect(double.server.sandboxes.all.size).toBe(4);
    expect([...double.server.sandboxes.all.values()].every((s) => s.status === "TERMINATED")).toBe(true);
  });
});
