import net from "node:net";
import { type FakeControlPlane, startFakeControlPlane } from "@denv/sdk/testing";
import { Protection } from "@denv/spec";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildCli, denv, oneJson, removeTempDirs } from "./testing/harness.js";

let fake: FakeControlPlane;
let env: Record<string, string>;

beforeAll(async () => {
  buildCli();
  fake = await startFakeControlPlane();
  env = { DENV_URL: fake.url, DENV_TOKEN: fake.memberToken };
});
afterAll(async () => {
  await fake?.close();
  removeTempDirs();
});

describe("denv exec", () => {
  it("passes the command's exit code through and streams its output", async () => {
    const ok = await denv(["exec", "quickstart/alpha", "--", "echo", "-n", "hello"], { env });
    expect(ok).toEqual({ status: 0, stdout: "-n hello\n", stderr: "" });
    const three = await denv(["exec", "quickstart/alpha", "fail-with", "3", "broken"], { env });
    expect(three).toEqual({ status: 3, stdout: "", stderr: "broken\n" });
  });

  it("streams stdin when it is not a terminal", async () => {
    const big = "z".repeat(300_000);
    const run = await denv(["exec", "quickstart/alpha", "cat"], { env, input: big });
    expect(run.status).toBe(0);
    expect(run.stdout).toBe(big);
  });

  it("sends --service, --user, --cwd and -e", async () => {
    const who = await denv(["exec", "-u", "agent", "quickstart/alpha", "whoami"], { env });
    expect(who.stdout).toBe("agent\n");
    const pwd = await denv(["exec", "quickstart/alpha", "--cwd", "/tmp", "--service", "db", "pwd"], { env });
    expect(pwd.stdout).toBe("/tmp\n");
    const vars = await denv(["exec", "-e", "A=1", "--env", "B=x=y", "quickstart/alpha", "printenv", "B"], {
      env,
    });
    expect(vars.stdout).toBe("x=y\n");
  });

  it("exits 124 on timeout, 126 and 127 when the command cannot start", async () => {
    const slow = await denv(["exec", "quickstart/alpha", "--timeout", "0.1", "--", "sleep", "5"], { env });
    expect(slow.status).toBe(124);
    expect(slow.stderr).toBe("denv exec: the command timed out after 0.1s and was killed\n");
    expect((await denv(["exec", "quickstart/alpha", "noexec"], { env })).status).toBe(126);
    const missing = await denv(["exec", "quickstart/alpha", "nope"], { env });
    expect(missing.status).toBe(127);
    expect(missing.stderr).toBe("denv-fake: nope: not found\n");
    const json = await denv(["exec", "--json", "--timeout", "0.1", "quickstart/alpha", "sleep", "5"], {
      env,
    });
    expect(json.status).toBe(124);
    expect(oneJson(json.stdout)).toMatchObject({ exit_code: 124, timed_out: true });
  });

  it("exits 125 when denv itself fails", async () => {
    const root = await denv(["exec", "--user", "root", "quickstart/alpha", "id"], { env });
    expect(root.status).toBe(125);
    expect(root.stderr).toBe(`denv exec: ${Protection.agentRoot("main")}\n`);
    const gone = await denv(["exec", "quickstart/nope", "id"], { env });
    expect(gone).toMatchObject({
      status: 125,
      stderr: "denv exec: environment 'quickstart/nope' does not exist\n",
    });
    const token = await denv(["exec", "quickstart/alpha", "id"], { env: { ...env, DENV_TOKEN: "wrong" } });
    expect(token.status).toBe(125);
    expect(token.stderr).toContain("check the token");

    const port = await new Promise<number>((resolve) => {
      const server = net.createServer().listen(0, "127.0.0.1", () => {
        const { port } = server.address() as net.AddressInfo;
        server.close(() => resolve(port));
      });
    });
    const down = await denv(["exec", "quickstart/alpha", "id"], {
      env: { ...env, DENV_URL: `http://127.0.0.1:${port}` },
    });
    expect(down.status).toBe(125);
    expect(down.stderr).toContain(`denv exec: cannot reach the control plane at http://127.0.0.1:${port}: `);
    expect(down.stderr).toContain("'denv up' starts one on this machine");

    const json = await denv(["exec", "quickstart/nope", "--json", "id"], { env });
    expect(json.status).toBe(125);
    expect(oneJson(json.stdout)).toEqual({
      ok: false,
      error: { code: "not_found", message: "environment 'quickstart/nope' does not exist" },
    });
  });

  it("exits 125 on bad usage, which could otherwise pass for the command's own 2", async () => {
    for (const args of [
      ["exec", "quickstart/alpha"],
      ["exec"],
      ["exec", "--timeout", "soon", "quickstart/alpha", "id"],
    ]) {
      const run = await denv(args, { env });
      expect(run.status, args.join(" ")).toBe(125);
      expect(run.stderr, args.join(" ")).toContain("usage: denv exec PROJECT/ENV");
    }
  });
});
