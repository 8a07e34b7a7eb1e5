import { existsSync, mkdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import path from "node:path";
import { type FakeControlPlane, startFakeControlPlane } from "@denv/sdk/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildCli, denv, home, oneJson, removeTempDirs } from "./testing/harness.js";

let fake: FakeControlPlane;

beforeAll(async () => {
  buildCli();
  fake = await startFakeControlPlane();
});
afterAll(async () => {
  await fake?.close();
  removeTempDirs();
});

/** A HOME with a config file. */
function withConfig(config: Record<string, string>): { HOME: string; file: string } {
  const HOME = home();
  const file = path.join(HOME, ".config", "denv", "config.json");
  mkdirSync(path.dirname(file), { recursive: true });
  writeFileSync(file, JSON.stringify(config));
  return { HOME, file };
}

describe("configuration", () => {
  it("takes the file, then DENV_* variables, then flags", async () => {
    const { HOME } = withConfig({ url: "http://file:1", token: "file-token", project: "fromfile" });
    const get = (key: string, env: Record<string, string>, flags: string[] = []) =>
      denv(["config", "get", key, ...flags], { env: { HOME, ...env } });
    expect(await get("url", {})).toEqual({ status: 0, stdout: "http://file:1\n", stderr: "" });
    expect((await get("url", { DENV_URL: "http://env:2" })).stdout).toBe("http://env:2\n");
    expect((await get("url", { DENV_URL: "http://env:2" }, ["--url", "http://flag:3"])).stdout).toBe(
      "http://flag:3\n",
    );
    expect((await get("token", { DENV_TOKEN: "env-token" })).stdout).toBe("env-token\n");
    expect((await get("project", {}, ["--project", "fromflag"])).stdout).toBe("fromflag\n");
    expect(oneJson((await get("project", { DENV_PROJECT: "fromenv" }, ["--json"])).stdout)).toMatchObject({
      value: "fromenv",
      source: "env",
    });
  });

  it("uses the configured URL and token for requests, and the flag over both", async () => {
    const { HOME } = withConfig({ url: fake.url, token: "wrong" });
    const bad = await denv(["projects", "list"], { env: { HOME } });
    expect(bad.status).toBe(1);
    expect(bad.stderr).toContain("denv projects list: a valid API token is required");
    const good = await denv(["projects", "list", "--token", fake.adminToken], { env: { HOME } });
    expect(good.status, good.stderr).toBe(0);
    expect(good.stdout).toContain("quickstart");
  });

  it("reads $XDG_CONFIG_HOME and DENV_CONFIG", async () => {
    const xdg = withConfig({ url: "http://xdg:1" });
    const moved = path.join(xdg.HOME, "xdg");
    mkdirSync(path.join(moved, "denv"), { recursive: true });
    writeFileSync(path.join(moved, "denv", "config.json"), JSON.stringify({ url: "http://moved:1" }));
    expect(
      (await denv(["config", "get", "url"], { env: { HOME: xdg.HOME, XDG_CONFIG_HOME: moved } })).stdout,
    ).toBe("http://moved:1\n");
    expect(
      (await denv(["config", "get", "url"], { env: { HOME: xdg.HOME, DENV_CONFIG: xdg.file } })).stdout,
    ).toBe("http://xdg:1\n");
  });

  it("sets and unsets keys, refusing bad ones", async () => {
    const HOME = home();
    expect((await denv(["config", "set", "project", "demo"], { env: { HOME } })).status).toBe(0);
    expect((await denv(["config", "get", "project"], { env: { HOME } })).stdout).toBe("demo\n");
    expect((await denv(["config", "unset", "project"], { env: { HOME } })).status).toBe(0);
    const unset = await denv(["config", "get", "project"], { env: { HOME } });
    expect(unset.status).toBe(1);
    expect(unset.stderr).toMatch(
      /^denv config get: 'project' is not set \(no flag, no DENV_PROJECT, nothing in .*config\.json\)\n$/,
    );
    expect((await denv(["config", "set", "url", "ftp://x"], { env: { HOME } })).status).toBe(2);
    expect((await denv(["config", "set", "colour", "red"], { env: { HOME } })).stderr).toContain(
      "unknown key 'colour' (one of url, token, project)",
    );
  });

  it("says how to configure a URL when there is none", async () => {
    const run = await denv(["projects", "list"], { env: { HOME: home() } });
    expect(run.status).toBe(1);
    expect(run.stderr).toBe(
      "denv projects list: no control plane URL: run 'denv login --url URL --token TOKEN', set DENV_URL or pass --url (or start one on this machine with 'denv up')\n",
    );
  });
});

describe("denv login", () => {
  it("checks the token with /v1/whoami and saves the config with mode 0600", async () => {
    const HOME = home();
    const run = await denv(["login", "--url", fake.url, "--token", fake.memberToken], { env: { HOME } });
    expect(run.status, run.stderr).toBe(0);
    const file = path.join(HOME, ".config", "denv", "config.json");
    expect(run.stdout).toBe(
      `logged in to ${fake.url} as ci (member, project quickstart)\nsaved to ${file}\n`,
    );
    expect(statSync(file).mode & 0o777).toBe(0o600);
    expect(JSON.parse(readFileSync(file, "utf8"))).toEqual({ url: fake.url, token: fake.memberToken });
    expect((await denv(["env", "list", "quickstart"], { env: { HOME } })).status).toBe(0);
  });

  it("saves nothing when the check fails, and needs both values", async () => {
    const HOME = home();
    const run = await denv(["login", "--url", fake.url, "--token", "nope"], { env: { HOME } });
    expect(run.status).toBe(1);
    expect(existsSync(path.join(HOME, ".config", "denv", "config.json"))).toBe(false);
    const missing = await denv(["login", "--url", fake.url], { env: { HOME } });
    expect(missing.status).toBe(2);
    expect(missing.stderr).toContain("login needs --url and --token (or DENV_URL and DENV_TOKEN)");
  });
});
