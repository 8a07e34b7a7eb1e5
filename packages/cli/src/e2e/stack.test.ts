import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { HostRefusals, Protection } from "@denv/spec";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { repo, type Stack, startStack } from "./stack.js";

/**
 * denv as a whole system on one machine: the CLI against a real control plane and a real denvd
 * on the real Docker engine, through `denv up`.
 */
describe("full stack: CLI -> control plane -> denvd -> Docker", () => {
  let stack: Stack;
  const quickstart = path.join(repo, "examples/quickstart");

  beforeAll(async () => {
    stack = await startStack();
    const created = await stack.denv(["projects", "create", "quickstart"]);
    expect(created.code).toBe(0);
  }, 180_000);
  afterAll(async () => stack?.close(), 180_000);

  it("deploys with every phase and its evidence, and records v1", async () => {
    const d = await stack.json<{
      status: string;
      kind: string;
      phases: Array<{ name: string; status: string }>;
    }>(["deploy", quickstart, "--project", "quickstart", "--env", "alpha"]);
    expect(d.kind).toBe("deploy");
    expect(d.status).toBe("succeeded");
    expect(d.phases.map((p) => p.name)).toEqual([
      "resolve source",
      "place",
      "validate",
      "build",
      "start",
      "health",
      "probe",
      "snapshot",
      "smoke verify",
      "switch",
    ]);
    // The quickstart asks for no smoke verify (x-denv.verifier.smoke); every other phase ran.
    for (const p of d.phases)
      expect(p.status, p.name).toBe(p.name === "smoke verify" ? "skipped" : "succeeded");
    const versions = await stack.json<{ versions: Array<{ id: string }> }>([
      "versions",
      "list",
      "quickstart",
    ]);
    expect(versions.versions.map((v) => v.id)).toEqual(["quickstart@v1"]);
  }, 300_000);

  it("forks, and execs with the exit code passed through", async () => {
    const fork = await stack.denv(["env", "fork", "quickstart/alpha", "--name", "work"]);
    expect(fork.code).toBe(0);
    const ok = await stack.denv(["exec", "quickstart/work", "--", "sh", "-c", "id -u; exit 3"]);
    expect(ok.code).toBe(3);
    expect(ok.stdout).toBe("1000\n");
    const missing = await stack.denv(["exec", "quickstart/work", "--", "no-such-command"]);
    expect(missing.code).toBe(127);
    const stdin = await stack.denv(["exec", "-i", "quickstart/work", "--", "wc", "-c"], {
      input: "x".repeat(100_000),
    });
    expect(stdin.stdout.trim()).toBe("100000");
  }, 120_000);

  it("refuses root with the exact message, sync and streaming alike", async () => {
    const r = await stack.denv(["exec", "quickstart/work", "--user", "root", "--", "id"]);
    expect(r.code).toBe(125);
    expect(r.stderr).toContain(Protection.agentRoot("app"));
    const streamed = await stack.denv(["exec", "-i", "quickstart/work", "--user", "root", "--", "id"], {
      input: "",
    });
    expect(streamed.code).toBe(125);
    expect(streamed.stderr).toContain(Protection.agentRoot("app"));
  }, 60_000);

  it("copies files both ways as the agent user", async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), "denv-cp-"));
    try {
      writeFileSync(path.join(dir, "notes.txt"), "hello from the host\n");
      const up = await stack.denv([
        "cp",
        path.join(dir, "notes.txt"),
        "quickstart/work:/workspace/notes.txt",
      ]);
      expect(up.code).toBe(0);
      const owner = await stack.denv([
        "exec",
        "quickstart/work",
        "--",
        "stat",
        "-c",
        "%u %s",
        "/workspace/notes.txt",
      ]);
      expect(owner.stdout).toBe("1000 20\n");
      const down = await stack.denv([
        "cp",
        "quickstart/work:/workspace/app/orders.py",
        path.join(dir, "orders.py"),
      ]);
      expect(down.code).toBe(0);
      expect(readFileSync(path.join(dir, "orders.py"), "utf8")).toContain("def ");
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);

  it("port-forwards to a service inside the environment", async () => {
    const { spawn } = await import("node:child_process");
    const { cli } = await import("./stack.js");
    const child = spawn("node", [cli, "port-forward", "quickstart/work", "app:8080", "0", "--json"], {
      env: stack.env,
      stdio: ["ignore", "pipe", "pipe"],
    });
    try {
      const line = await new Promise<string>((resolve, reject) => {
        let buf = "";
        child.stdout.on("data", (b: Buffer) => {
          buf += b.toString();
          if (buf.includes("\n")) resolve(buf.split("\n")[0] as string);
        });
        child.on("exit", (code) => reject(new Error(`port-forward exited ${code}`)));
      });
      const { port } = JSON.parse(line) as { port: number };
      const body = await new Promise<string>((resolve, reject) => {
        const sock = net.connect(port, "127.0.0.1", () => {
          sock.write("GET /health HTTP/1.0\r\nHost: app\r\n\r\n");
        });
        let got = "";
        sock.on("data", (b) => {
          got += b.toString();
        });
        sock.on("end", () => resolve(got));
        sock.on("error", reject);
      });
      expect(body).toMatch(/^HTTP\/1\.[01] 200/);
    } finally {
      child.kill("SIGINT");
    }
  }, 60_000);

  it("verifies: 1.0 after the scripted fix, 0.0 untouched, and the episode is a version", async () => {
    const fix = readFileSync(path.join(quickstart, "agent/fix.sh"));
    const ran = await stack.denv(["exec", "-i", "quickstart/work", "--", "bash", "-s"], { input: fix });
    expect(ran.code).toBe(0);
    const solved = await stack.json<{ status: string; reward: number; version: string }>([
      "verify",
      "quickstart/work",
    ]);
    expect(solved.status).toBe("graded");
    expect(solved.reward).toBe(1);
    const untouched = await stack.json<{ reward: number }>(["verify", "quickstart/alpha"]);
    expect(untouched.reward).toBe(0);
    const versions = await stack.json<{ versions: Array<{ id: string }> }>([
      "versions",
      "list",
      "quickstart",
    ]);
    expect(versions.versions.map((v) => v.id)).toContain(solved.version);
  }, 180_000);

  it("snapshots after a verify, then rolls alpha back to v1", async () => {
    const snap = await stack.json<{ status: string; result: { id: string } }>([
      "env",
      "snapshot",
      "quickstart/alpha",
    ]);
    expect(snap.status).toBe("succeeded");
    expect(snap.result.id).toMatch(/^quickstart@v\d+$/);
    const rb = await stack.json<{ status: string; phases: Array<{ name: string; status: string }> }>([
      "env",
      "rollback",
      "quickstart/alpha",
      "--version",
      "quickstart@v1",
    ]);
    expect(rb.status).toBe("succeeded");
    expect(rb.phases.map((p) => p.name)).toEqual([
      "place",
      "transfer",
      "restore",
      "start",
      "health",
      "probe",
      "switch",
    ]);
    // One host holds every version: nothing moved.
    expect(rb.phases.find((p) => p.name === "transfer")).toMatchObject({ status: "skipped" });
    const alpha = await stack.json<{ version: string; status: string }>(["env", "show", "quickstart/alpha"]);
    expect(alpha.version).toBe("quickstart@v1");
    expect(alpha.status).toBe("running");
  }, 180_000);

  it("refuses a file that asks for another kind than its project's, and creates nothing", async () => {
    expect((await stack.denv(["projects", "create", "escalate"])).code).toBe(0);
    const dir = mkdtempSync(path.join(os.tmpdir(), "denv-escalate-"));
    writeFileSync(
      path.join(dir, "compose.yaml"),
      'services:\n  main:\n    image: debian:bookworm-slim\n    command: ["sleep", "infinity"]\nx-denv:\n  kind: service\n  egress: allow\n',
    );
    const d = await stack
      .json<{ status: string; error?: { message: string } }>(["deploy", dir, "--project", "escalate"])
      .finally(() => rmSync(dir, { recursive: true, force: true }));
    expect(d.status).toBe("failed");
    expect(d.error?.message).toBe(HostRefusals.kindMismatch("escalate", "rl-environment", "service"));
    const envs = await stack.json<{ environments: unknown[] }>(["env", "list", "escalate"]);
    expect(envs.environments).toEqual([]);
  }, 180_000);
});
