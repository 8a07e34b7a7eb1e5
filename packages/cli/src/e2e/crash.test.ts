import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import path from "node:path";
import { DenvClient } from "@denv/sdk";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { repo, type Stack, startStack } from "./stack.js";

/**
 * A denvd killed with SIGKILL at each phase of a deploy, and a control plane killed in the middle
 * of one: after a restart the deployment finishes or fails cleanly, no command ran twice and
 * nothing is orphaned.
 */
describe("crashes in the middle of a deploy", () => {
  let stack: Stack;
  let client: DenvClient;
  const quickstart = path.join(repo, "examples/quickstart");

  beforeAll(async () => {
    stack = await startStack();
    client = new DenvClient({ url: stack.url, token: stack.token });
    expect((await stack.denv(["projects", "create", "crash"])).code).toBe(0);
  }, 180_000);
  afterAll(async () => stack?.close(), 180_000);

  const pidOf = (role: "cp" | "denvd") =>
    Number(readFileSync(path.join(stack.dataDir, `${role}.pid`), "utf8"));

  /** Starts a deploy and SIGKILLs `role` as soon as `phase` starts; then restarts it with `denv up`. */
  async function deployAndKill(env: string, role: "cp" | "denvd", phase: string) {
    const started = await stack.json<{ id: string }>([
      "deploy",
      quickstart,
      "--project",
      "crash",
      "--env",
      env,
      "--no-wait",
    ]);
    let killed = false;
    // Following stops at the kill: the deployment cannot end before the program is back.
    const follow = new AbortController();
    await client
      .waitForDeployment(started.id, {
        signal: follow.signal,
        onPhase: (p) => {
          if (!killed && p.name === phase && p.status === "running") {
            killed = true;
            process.kill(pidOf(role), "SIGKILL");
            follow.abort();
          }
        },
      })
      .catch(() => undefined);
    expect(killed).toBe(true);
    const up = await stack.denv([
      "up",
      "--data-dir",
      stack.dataDir,
      "--listen",
      stack.url.replace("http://", ""),
    ]);
    expect(up.code).toBe(0);
    const deadline = Date.now() + 120_000;
    let d = await client.getDeployment(started.id);
    while (d.status === "running" || d.status === "queued") {
      if (Date.now() > deadline) throw new Error(`deployment ${d.id} is stuck ${d.status}`);
      await new Promise((r) => setTimeout(r, 250));
      d = await client.getDeployment(started.id);
    }
    return d;
  }

  /** Containers of this host that no environment of the control plane accounts for. */
  async function orphans(): Promise<string[]> {
    const envs = await client.listEnvironments("crash");
    const known = new Set(envs.flatMap((e) => e.services.map((s) => s.container_id)));
    const ours = execFileSync("docker", [
      "ps",
      "-aq",
      "--no-trunc",
      "--filter",
      `label=ai.denv.host=${stack.hostId()}`,
    ])
      .toString()
      .split("\n")
      .filter(Boolean);
    return ours.filter((id) => !known.has(id));
  }

  /** Sets of containers created by the deployment's deploy command (one per service, at most once). */
  function createdBy(deploymentId: string): number {
    return execFileSync("docker", ["ps", "-aq", "--filter", `label=ai.denv.command=${deploymentId}.deploy`])
      .toString()
      .split("\n")
      .filter(Boolean).length;
  }

  for (const phase of ["build", "start", "health", "probe", "snapshot"]) {
    it(`denvd killed at '${phase}': the deploy finishes or fails cleanly, nothing twice, nothing orphaned`, async () => {
      const env = `k-${phase}`;
      const d = await deployAndKill(env, "denvd", phase);
      expect(["succeeded", "failed"]).toContain(d.status);
      if (d.status === "failed") {
        expect(d.error?.message).toBeTruthy();
        const e = await client.getEnvironment(`crash/${env}`).catch(() => undefined);
        expect(e?.status ?? "gone").not.toBe("running");
      } else {
        const e = await client.getEnvironment(`crash/${env}`);
        expect(e.status).toBe("running");
        const r = await stack.denv(["exec", `crash/${env}`, "--", "true"]);
        expect(r.code).toBe(0);
      }
      expect([0, 2]).toContain(createdBy(d.id));
      expect(await orphans()).toEqual([]);
    }, 240_000);
  }

  it("a control plane killed mid-deploy resumes it after a restart", async () => {
    const d = await deployAndKill("k-cp", "cp", "health");
    expect(["succeeded", "failed"]).toContain(d.status);
    expect([0, 2]).toContain(createdBy(d.id));
    expect(await orphans()).toEqual([]);
  }, 240_000);
});
