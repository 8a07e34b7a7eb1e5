import { randomBytes } from "node:crypto";
import { Protection } from "@denv/spec";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Runtime } from "./runtime/runtime.js";
import { openTestRuntime, writeProject } from "./testing/harness.js";

const COMPOSE = `
services:
  main:
    image: debian:bookworm-slim
    command: ["sleep", "infinity"]
    init: true
  side:
    image: debian:bookworm-slim
    command: ["sleep", "infinity"]
    init: true
x-denv:
  agent: main
`;

describe("exec contract", () => {
  let rt: Runtime & AsyncDisposable;
  const env = "exe/alpha";

  beforeAll(async () => {
    rt = await openTestRuntime();
    await rt.deploy({ project: "exe", projectDir: await writeProject({ "compose.yaml": COMPOSE }) });
  });
  afterAll(async () => rt[Symbol.asyncDispose]());

  it("runs argv as the agent user in the workdir by default", async () => {
    const r = await rt.exec(env, { cmd: ["sh", "-c", "id -u; pwd"] });
    expect(r.exitCode).toBe(0);
    expect(r.stdout.toString()).toBe("1000\n/workspace\n");
    expect(r.timedOut).toBe(false);
  });

  it("passes the exit code and stderr through", async () => {
    const r = await rt.exec(env, { shell: "echo oops >&2; exit 7" });
    expect(r.exitCode).toBe(7);
    expect(r.stderr.toString()).toBe("oops\n");
  });

  it("honours cwd, env and user on another service", async () => {
    const r = await rt.exec(env, {
      service: "side",
      cmd: ["sh", "-c", 'echo "$FOO $(id -u) $(pwd)"'],
      cwd: "/tmp",
      env: { FOO: "bar" },
      user: "0",
    });
    expect(r.stdout.toString()).toBe("bar 0 /tmp\n");
  });

  it("streams large binary stdin unchanged", async () => {
    const data = randomBytes(8 * 1024 * 1024);
    const r = await rt.exec(env, { cmd: ["sha256sum"], stdin: data });
    const { createHash } = await import("node:crypto");
    expect(r.stdout.toString().split(" ")[0]).toBe(createHash("sha256").update(data).digest("hex"));
  });

  it("round-trips binary stdin with NUL bytes through cat", async () => {
    const data = Buffer.from([0, 1, 2, 0, 255, 254, 0]);
    const r = await rt.exec(env, { cmd: ["cat"], stdin: data });
    expect(Buffer.compare(r.stdout, data)).toBe(0);
  });

  it("kills the whole process tree on timeout", async () => {
    const marker = `denv-timeout-${randomBytes(3).toString("hex")}`;
    const r = await rt.exec(env, {
      shell: `sh -c 'sleep 300; echo ${marker}' & (sleep 300 &) ; sleep 300`,
      timeout: 1,
    });
    expect(r.timedOut).toBe(true);
    expect(r.exitCode).toBe(124);
    expect(r.durationMs).toBeLessThan(10_000);
    const ps = await rt.exec(env, { cmd: ["sh", "-c", "ps -eo args | grep -c '^sleep 300' || true"] });
    expect(ps.stdout.toString().trim()).toBe("0");
  });

  it("caps output per stream and says it truncated", async () => {
    const r = await rt.exec(env, {
      shell: "head -c 100000 /dev/zero; head -c 10 /dev/zero >&2",
      outputLimit: 1000,
    });
    expect(r.stdout.length).toBe(1000);
    expect(r.stderr.length).toBe(10);
    expect(r.truncated).toBe(true);
    expect(r.exitCode).toBe(0);
  });

  it("reports a missing executable as 127 and a missing user as 126", async () => {
    const missing = await rt.exec(env, { cmd: ["no-such-binary-here"] });
    expect(missing.exitCode).toBe(127);
    const user = await rt.exec(env, { cmd: ["true"], user: "nosuchuser" });
    expect(user.exitCode).toBe(126);
    expect(user.stdout.toString() + user.stderr.toString()).toContain("nosuchuser");
  });

  it("refuses root on the agent service with the exact message", async () => {
    for (const user of ["root", "0", "0:0", "root:root"]) {
      await expect(rt.exec(env, { cmd: ["id"], user })).rejects.toThrow(Protection.agentRoot("main"));
    }
    await expect(rt.exec(env, { cmd: ["id"], user: "root" })).rejects.toThrow(
      "refused: exec as root in agent service 'main' of an rl-environment; the agent is never root (protection 1)",
    );
  });

  it("refuses a request with both cmd and shell", async () => {
    await expect(rt.exec(env, { cmd: ["true"], shell: "true" })).rejects.toThrow(/exactly one of 'cmd'/);
  });

  it("names the service when it does not exist", async () => {
    await expect(rt.exec(env, { service: "nope", cmd: ["true"] })).rejects.toThrow(/no service 'nope'/);
  });
});
