import type { ServiceStartTimes } from "@denv/spec";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runExec } from "../exec-runner.js";
import { leftovers, openTestRuntime, writeProject } from "../testing/harness.js";
import type { Runtime } from "./runtime.js";

/**
 * The start order of an environment's services, read from the evidence (each service's
 * `timings.services` entry) and enforced by the test itself where an order could otherwise
 * happen by chance: `slow` becomes healthy only when the test creates its ready file, which it
 * does only once `follower` runs. No assertion depends on how long anything takes.
 */
const COMPOSE = `
services:
  slow:
    image: debian:bookworm-slim
    command: ["sleep", "infinity"]
    init: true
    healthcheck:
      test: ["CMD", "test", "-f", "/tmp/ready"]
      # Docker's own first check comes after 30 s: only denvd's start-time polling can see it pass.
      interval: 30s
      retries: 3
  quick:
    image: debian:bookworm-slim
    command: ["sleep", "infinity"]
    init: true
  dependant:
    image: debian:bookworm-slim
    command: ["sleep", "infinity"]
    init: true
    depends_on:
      slow: { condition: service_healthy }
  follower:
    image: debian:bookworm-slim
    command: ["sleep", "infinity"]
    init: true
    depends_on:
      quick: { condition: service_started }
  seed:
    image: debian:bookworm-slim
    command: ["true"]
  after-seed:
    image: debian:bookworm-slim
    command: ["sleep", "infinity"]
    init: true
    depends_on:
      seed: { condition: service_completed_successfully }
x-denv:
  agent: quick
`;

// `broken` cannot pass its check, so it is waited for until it exits (a service without one
// would count as ready while it still ran). Docker would call `never` unhealthy only after
// 3 x 60 s: longer than the test may take.
const BROKEN = `
services:
  never:
    image: debian:bookworm-slim
    command: ["sleep", "infinity"]
    init: true
    healthcheck:
      test: ["CMD", "false"]
      interval: 60s
  broken:
    image: debian:bookworm-slim
    command: ["sh", "-c", "sleep 1; exit 3"]
    healthcheck:
      test: ["CMD", "false"]
      interval: 60s
  waiting:
    image: debian:bookworm-slim
    command: ["sleep", "infinity"]
    init: true
    depends_on:
      broken: { condition: service_healthy }
x-denv:
  agent: waiting
`;

// `counted` fails its check until the test creates /tmp/ready, and writes down when each check ran.
const COUNTED = `
services:
  counted:
    image: debian:bookworm-slim
    command: ["sleep", "infinity"]
    init: true
    healthcheck:
      test: ["CMD-SHELL", "date +%s%N >> /tmp/checks; test -f /tmp/ready"]
      interval: 60s
x-denv:
  agent: counted
`;

function byService(times: ServiceStartTimes[] | undefined): Record<string, ServiceStartTimes> {
  expect(times).toBeDefined();
  return Object.fromEntries((times ?? []).map((t) => [t.service, t]));
}

/** The two were asked to start before either of them had started: they started together. */
function startedTogether(a: ServiceStartTimes | undefined, b: ServiceStartTimes | undefined): boolean {
  if (!a || !b) return false;
  return a.start_ms < b.running_ms && b.start_ms < a.running_ms;
}

describe("services start as soon as their depends_on conditions hold", () => {
  let rt: Runtime & AsyncDisposable;

  beforeAll(async () => {
    rt = await openTestRuntime();
  });
  afterAll(async () => rt[Symbol.asyncDispose]());

  it("starts independent services together and holds a service_healthy dependant back", async () => {
    const dir = await writeProject({ "compose.yaml": COMPOSE });
    const deploying = rt.deploy({ project: "order", projectDir: dir });
    let settled = false;
    deploying.then(
      () => (settled = true),
      () => (settled = true),
    );
    // `follower` waits only for `quick`: it runs while `slow` is still unhealthy. Only then is
    // `slow` made healthy, so a follower held back by `slow` would never start.
    const follower = rt.host.dockerName("order", "alpha", "follower");
    for (;;) {
      // It cannot end before slow is healthy: when it did, it failed (and says why).
      if (settled) await deploying;
      const state = await rt.host.docker.containers.inspect(follower).catch(() => undefined);
      if (state?.running) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    const slowContainer = rt.host.dockerName("order", "alpha", "slow");
    expect((await rt.host.docker.containers.inspect(slowContainer))?.health).toBe("starting");
    const touched = await runExec(rt.host.docker, {
      containerId: slowContainer,
      argv: ["touch", "/tmp/ready"],
    });
    expect(touched.exitCode).toBe(0);
    const env = await deploying;

    const t = byService(env.evidence.timings.services);
    expect(Object.keys(t).sort()).toEqual(["after-seed", "dependant", "follower", "quick", "seed", "slow"]);
    // No dependencies: all three were started at once.
    expect(startedTogether(t.slow, t.quick)).toBe(true);
    expect(startedTogether(t.slow, t.seed)).toBe(true);
    // service_healthy: the dependant was started only once slow was ready, and after nothing else.
    expect(t.dependant?.start_ms).toBeGreaterThanOrEqual(t.slow?.ready_ms ?? Number.POSITIVE_INFINITY);
    // service_started: the follower went as soon as quick ran, before slow was ready.
    expect(t.follower?.start_ms).toBeGreaterThanOrEqual(t.quick?.running_ms ?? Number.POSITIVE_INFINITY);
    expect(t.follower?.start_ms).toBeLessThanOrEqual(t.slow?.ready_ms ?? 0);
    // service_completed_successfully: after the one-shot had run.
    expect(t["after-seed"]?.start_ms).toBeGreaterThanOrEqual(t.seed?.running_ms ?? Number.POSITIVE_INFINITY);
    // denvd's own check passed; Docker still waits for its first interval (30 s): the file's
    // healthcheck is what governs the running service.
    expect((await rt.host.docker.containers.inspect(slowContainer))?.health).toBe("starting");
    for (const s of Object.values(t)) expect(s.ready_ms).toBeGreaterThanOrEqual(s.running_ms);

    // A fork follows the same rule (slow's ready file is in its committed layer).
    const version = await rt.snapshot(env.id);
    const fork = await rt.fork(version.id, { name: "fork" });
    const f = byService(fork.evidence.timings.services);
    expect(startedTogether(f.slow, f.quick)).toBe(true);
    expect(f.dependant?.start_ms).toBeGreaterThanOrEqual(f.slow?.ready_ms ?? Number.POSITIVE_INFINITY);
    expect(fork.evidence.timings).toMatchObject({
      network_ms: expect.any(Number),
      firewall_ms: expect.any(Number),
      volumes_ms: expect.any(Number),
      containers_ms: expect.any(Number),
      baseline_ms: expect.any(Number),
    });
    expect(fork.evidence.probe).toMatchObject({ ok: true });
    await rt.destroy(fork.id);
    await rt.destroy(env.id);
  });

  it("stops every wait at the first failure and leaves nothing behind", async () => {
    const dir = await writeProject({ "compose.yaml": BROKEN });
    // `never` never becomes healthy: without the stop this would wait out the health timeout.
    await expect(rt.deploy({ project: "broken", projectDir: dir })).rejects.toThrow(
      "service 'broken' exited with 3 while starting",
    );
    expect(await leftovers(rt)).toBe(0);
    expect((await rt.list()).environments).toEqual([]);
  });

  it("waits longer after each failed check while a service starts", async () => {
    const dir = await writeProject({ "compose.yaml": COUNTED });
    const deploying = rt.deploy({ project: "counted", projectDir: dir });
    deploying.catch(() => undefined);
    const id = rt.host.dockerName("counted", "alpha", "counted");
    const checks = async () => {
      const r = await runExec(rt.host.docker, { containerId: id, argv: ["cat", "/tmp/checks"] }).catch(
        () => undefined,
      );
      return (r?.stdout.toString() ?? "")
        .split("\n")
        .filter(Boolean)
        .map((ns) => Number(BigInt(ns) / 1_000_000n));
    };
    while ((await checks()).length < 8) await new Promise((r) => setTimeout(r, 100));
    const at = (await checks()).slice(0, 8);
    expect((await runExec(rt.host.docker, { containerId: id, argv: ["touch", "/tmp/ready"] })).exitCode).toBe(
      0,
    );
    const env = await deploying;
    // After the k-th failure denvd sleeps at least 50 ms x 1.5^(k-1) (capped at 1 s) before the
    // next check: seven sleeps of at least 50, 75, 112, 169, 253, 380 and 570 ms. At a fixed
    // 50 ms the eight checks would follow each other as fast as a check runs.
    const pauses = Array.from({ length: 7 }, (_, k) => Math.min(50 * 1.5 ** k, 1000));
    expect((at[7] ?? 0) - (at[0] ?? 0)).toBeGreaterThanOrEqual(Math.floor(pauses.reduce((a, b) => a + b)));
    for (let k = 1; k < 8; k++)
      expect((at[k] ?? 0) - (at[k - 1] ?? 0)).toBeGreaterThanOrEqual(Math.floor(pauses[k - 1] ?? 0));
    await rt.destroy(env.id);
  });
});
