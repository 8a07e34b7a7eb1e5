import { spawn } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import net from "node:net";
import path from "node:path";
import { type FakeControlPlane, startFakeControlPlane } from "@denv/sdk/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildCli, cliPath, denv, home, oneJson, removeTempDirs, tempDir } from "./testing/harness.js";

let fake: FakeControlPlane;
let env: Record<string, string>;
let work: string;
/** The fake's file system of quickstart/alpha's agent service. */
let main: string;

beforeAll(async () => {
  buildCli();
  fake = await startFakeControlPlane();
  env = { DENV_URL: fake.url, DENV_TOKEN: fake.memberToken };
  work = tempDir("files");
  main = path.join(fake.filesRoot, "quickstart", "alpha", "main");
  mkdirSync(path.join(work, "app", "sub"), { recursive: true });
  writeFileSync(path.join(work, "app", "a.txt"), "alpha\n");
  writeFileSync(path.join(work, "app", "sub", "b.txt"), "beta\n");
  mkdirSync(path.join(main, "workspace"), { recursive: true });
});
afterAll(async () => {
  await fake?.close();
  removeTempDirs();
});

describe("denv cp", () => {
  it("uploads a folder into an existing folder, and a file under a new name", async () => {
    const into = await denv(["cp", "app", "quickstart/alpha:/workspace", "--json"], { env, cwd: work });
    expect(into.status, into.stderr).toBe(0);
    expect(oneJson(into.stdout)).toMatchObject({
      destination: "quickstart/alpha:/workspace/app",
      entries: 4,
      bytes: 11,
    });
    expect(readFileSync(path.join(main, "workspace", "app", "sub", "b.txt"), "utf8")).toBe("beta\n");

    const renamed = await denv(["cp", "app/a.txt", "quickstart/alpha:/workspace/renamed.txt"], {
      env,
      cwd: work,
    });
    expect(renamed.stdout).toBe(
      "copied app/a.txt to quickstart/alpha:/workspace/renamed.txt (1 entry, 6 bytes)\n",
    );
    expect(readFileSync(path.join(main, "workspace", "renamed.txt"), "utf8")).toBe("alpha\n");
  });

  it("downloads a folder into a folder, or to a new name, and a tar to stdout", async () => {
    const out = tempDir("down");
    const into = await denv(["cp", "quickstart/alpha:/workspace/app", out], { env });
    expect(into.status, into.stderr).toBe(0);
    expect(readFileSync(path.join(out, "app", "sub", "b.txt"), "utf8")).toBe("beta\n");

    const named = await denv(["cp", "quickstart/alpha:/workspace/app", path.join(out, "copy")], { env });
    expect(named.status, named.stderr).toBe(0);
    expect(readFileSync(path.join(out, "copy", "a.txt"), "utf8")).toBe("alpha\n");

    const file = await denv(["cp", "quickstart/alpha:/workspace/renamed.txt", path.join(out, "r.txt")], {
      env,
    });
    expect(file.status).toBe(0);
    expect(readFileSync(path.join(out, "r.txt"), "utf8")).toBe("alpha\n");

    const tar = await denv(["cp", "quickstart/alpha:/workspace/renamed.txt", "-"], { env });
    expect(tar.stdout.startsWith("renamed.txt\0")).toBe(true);
  });

  it("says what is missing, and exits 1", async () => {
    const remote = await denv(["cp", "quickstart/alpha:/nope", work], { env });
    expect(remote).toMatchObject({
      status: 1,
      stderr: "denv cp: '/nope' does not exist in service 'main'\n",
    });
    const local = await denv(["cp", "missing.txt", "quickstart/alpha:/workspace"], { env, cwd: work });
    expect(local).toMatchObject({ status: 1, stderr: "denv cp: missing.txt does not exist\n" });
    const both = await denv(["cp", "a", "b"], { env });
    expect(both.status).toBe(2);
    expect(both.stderr).toContain("exactly one of SRC and DEST is PROJECT/ENV:PATH");
    expect(existsSync(path.join(work, "nope"))).toBe(false);
  });
});

describe("denv port-forward", () => {
  it("prints the local address and tunnels bytes until SIGINT", async () => {
    const child = spawn(
      process.execPath,
      [cliPath, "port-forward", "quickstart/alpha", "db:5432", "--json"],
      {
        env: { PATH: process.env.PATH ?? "", HOME: home(), ...env },
        stdio: ["ignore", "pipe", "pipe"],
      },
    );
    const line = await new Promise<string>((resolve) =>
      child.stdout.once("data", (b: Buffer) => resolve(b.toString())),
    );
    const info = oneJson(line);
    expect(info).toMatchObject({
      host: "127.0.0.1",
      environment: "quickstart/alpha",
      service: "db",
      remote_port: 5432,
    });
    const echoed = await new Promise<string>((resolve, reject) => {
      const socket = net.connect(Number(info.port), "127.0.0.1", () =>
        socket.write("ping through the tunnel"),
      );
      socket.once("data", (b) => {
        resolve(b.toString());
        socket.end();
      });
      socket.on("error", reject);
    });
    expect(echoed).toBe("ping through the tunnel");
    const exited = new Promise<number | null>((resolve) => child.on("close", (code) => resolve(code)));
    child.kill("SIGINT");
    expect(await exited).toBe(0);
  });

  it("checks the service before listening", async () => {
    const run = await denv(["port-forward", "quickstart/alpha", "web:80"], { env });
    expect(run).toMatchObject({
      status: 1,
      stderr: "denv port-forward: environment quickstart/alpha has no service 'web' (it has main, db)\n",
    });
  });
});
