import { type ChildProcess, spawn } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { HostRefusals, Protection, ProviderMessages } from "@denv/spec";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildDenvd, DENVD_MAIN, denvd, projectTar, REPO } from "../../agent/testing/agent-harness.js";
import { FakeCp } from "../../agent/testing/fake-cp.js";
import { type E2bDouble, startE2bDouble } from "./testing/e2b-double.js";
import type { E2bServer } from "./testing/e2b-server.js";

/**
 * The denvd binary as a bridge to E2B (`denvd run --provider e2b`), as an operator starts it:
 * joined to a control plane (the fake one), its environments are sandboxes of the E2B double
 * (real containers on this machine's engine, through the real `e2b` SDK). The control plane's
 * commands go through the same protocol as to any host: deploy from a source stream, exec as
 * the agent, a snapshot and a fork of it, destroy and version delete; and what E2B cannot do is
 * refused in one line. Contacts only 127.0.0.1 and containers the double made.
 */
const PROJECT = {
  "compose.yaml": `services:
  main:
    build: .
x-denv:
  agent:
    user: "1000"
    workdir: /home/user
`,
  Dockerfile: "FROM debian:bookworm-slim\nCOPY --chown=user hello.txt /home/user/hello.txt\n",
  "hello.txt": "from the bridge\n",
};

describe("denvd run --provider e2b", { timeout: 120_000 }, () => {
  let double: E2bDouble;
  let server: E2bServer;
  let cp: FakeCp;
  let bridge: ChildProcess | undefined;
  let stderr = "";
  let stateDir = "";

  beforeAll(async () => {
    await buildDenvd();
    double = await startE2bDouble();
    server = double.server;
    cp = await FakeCp.start();
    stateDir = await mkdtemp(join(tmpdir(), "denvd-e2b-bridge-"));
    const joined = await denvd(["join", "--url", cp.url, "--token", cp.token, "--state-dir", stateDir]);
    expect(joined.code, joined.stderr).toBe(0);
    bridge = spawn(process.execPath, [DENVD_MAIN, "run", "--state-dir", stateDir, "--provider", "e2b"], {
      cwd: REPO,
      env: {
        PATH: "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        DENVD_PROVIDER_API_KEY: double.connection.apiKey,
        DENVD_PROVIDER_API_URL: double.connection.apiUrl,
        DENVD_PROVIDER_SANDBOX_URL: double.connection.sandboxUrl,
        DENVD_PROVIDER_CANARIES: `${double.canary.host}:${double.canary.port}`,
      },
      stdio: ["ignore", "ignore", "pipe"],
    });
    bridge.stderr?.on("data", (b: Buffer) => {
      stderr += b.toString();
    });
    await cp.waitFor((f) => f.type === "hello", 60_000);
  }, 120_000);

  afterAll(async () => {
    if (bridge && bridge.exitCode === null) {
      const exited = new Promise((r) => bridge?.once("exit", r));
      bridge.kill("SIGTERM");
      await exited;
    }
    await cp?.close();
    await double?.close();
    if (stateDir) await rm(stateDir, { recursive: true, force: true });
  }, 60_000);

  const ok = async (kind: Parameters<FakeCp["command"]>[0], payload: Record<string, unknown>) => {
    const r = await cp.result(cp.command(kind, payload), 90_000);
    expect(r.error, `${kind}: ${JSON.stringify(r.error)}\n${stderr}`).toBeUndefined();
    return r.result as Record<string, unknown>;
  };
  const exec = (environment: string, exec: Record<string, unknown>) =>
    ok("env.exec", { environment, exec }) as Promise<{ exit_code: number; stdout: string }>;

  it("deploys, execs as the agent, snapshots, forks apart, and leaves nothing at the provider", async () => {
    const deployed = cp.command("env.deploy", {
      project: "shop",
      environment: "alpha",
      source_stream: "src",
    });
    await cp.write("src", await projectTar(PROJECT, true), "file");
    const d = await cp.result(deployed, 90_000);
    expect(d.error, stderr).toBeUndefined();
    expect(d.result).toMatchObject({ id: "shop/alpha", status: "running", agent: { user: "1000" } });
    expect(server.sandboxes.size).toBe(1);

    const who = await exec("shop/alpha", { cmd: ["sh", "-c", "id -u; cat hello.txt"] });
    expect([who.exit_code, who.stdout]).toEqual([0, "1000\nfrom the bridge\n"]);
    const root = await cp.result(
      cp.command("env.exec", { environment: "shop/alpha", exec: { cmd: ["id"], user: "0" } }),
    );
    expect(root.error?.message).toBe(Protection.agentRoot("main"));

    await exec("shop/alpha", { shell: "echo before > note" });
    const version = await ok("env.snapshot", { environment: "shop/alpha", number: 1 });
    expect(version).toMatchObject({ id: "shop@v1", project: "shop" });
    const fork = await ok("env.fork", { version: "shop@v1", name: "fork" });
    expect(fork).toMatchObject({ id: "shop/fork", parent_version: "shop@v1" });
    await exec("shop/fork", { shell: "echo after > note" });
    const original = await exec("shop/alpha", { cmd: ["cat", "note"] });
    expect(original.stdout).toBe("before\n");

    await ok("env.destroy", { environment: "shop/fork" });
    await ok("env.destroy", { environment: "shop/alpha" });
    await ok("version.delete", { version: "shop@v1" });
    expect(server.sandboxes.size).toBe(0);
    expect(server.snapshots.size).toBe(0);
  });

  it("refuses in one line what E2B or a bridge cannot do, creating nothing", async () => {
    const two = cp.command("env.deploy", { project: "pair", environment: "alpha", source_stream: "two" });
    await cp.write(
      "two",
      await projectTar(
        {
          ...PROJECT,
          "compose.yaml": `${PROJECT["compose.yaml"]}`.replace(
            "services:\n",
            "services:\n  side:\n    image: debian:bookworm-slim\n",
          ),
        },
        true,
      ),
      "file",
    );
    const refused = await cp.result(two, 60_000);
    expect(refused.ok).toBe(false);
    expect(refused.error?.message).toBe(
      ProviderMessages.lacks("E2B", "multi_service", "a file of 2 services needs"),
    );
    expect(refused.error?.message).not.toContain("\n");
    expect(server.sandboxes.size).toBe(0);
    const tunnel = await cp.result(
      cp.command("env.connect", { environment: "pair/alpha", service: "main", port: 80, stream: "t" }),
    );
    expect(tunnel.error?.message).toBe(HostRefusals.needsEngine("a port tunnel", cp.hostId));
  });
});
