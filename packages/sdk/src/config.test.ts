import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { clientConfigPath, loadClientConfig, saveClientConfig } from "./index.js";

const made: string[] = [];
const tmp = () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), "denv-sdk-config-"));
  made.push(dir);
  return dir;
};
afterAll(() => {
  for (const dir of made) rmSync(dir, { recursive: true, force: true });
});

describe("client configuration", () => {
  it("finds the file under XDG_CONFIG_HOME, ~/.config or DENV_CONFIG", () => {
    expect(clientConfigPath({}, "/home/u")).toBe("/home/u/.config/denv/config.json");
    expect(clientConfigPath({ XDG_CONFIG_HOME: "/x" }, "/home/u")).toBe("/x/denv/config.json");
    // A relative XDG_CONFIG_HOME is invalid per the XDG spec and ignored.
    expect(clientConfigPath({ XDG_CONFIG_HOME: "rel" }, "/home/u")).toBe("/home/u/.config/denv/config.json");
    expect(clientConfigPath({ DENV_CONFIG: "/etc/denv.json", XDG_CONFIG_HOME: "/x" }, "/h")).toBe(
      "/etc/denv.json",
    );
  });

  it("reads the file, overridden by DENV_* variables, overridden by explicit values", () => {
    const home = tmp();
    saveClientConfig({ url: "http://file", token: "file-token", project: "file-project" }, { home, env: {} });
    const fileOnly = loadClientConfig({ home, env: {} });
    expect(fileOnly).toMatchObject({ url: "http://file", token: "file-token", project: "file-project" });
    expect(fileOnly.sources).toEqual({ url: "file", token: "file", project: "file" });

    const env = { DENV_URL: "http://env", DENV_PROJECT: "env-project" };
    const withEnv = loadClientConfig({ home, env });
    expect(withEnv).toMatchObject({ url: "http://env", token: "file-token", project: "env-project" });

    const withFlags = loadClientConfig({ home, env, overrides: { url: "http://flag", token: undefined } });
    expect(withFlags).toMatchObject({ url: "http://flag", token: "file-token", project: "env-project" });
    expect(withFlags.sources).toEqual({ url: "flag", token: "file", project: "env" });
  });

  it("writes mode 0600, atomically, keeping keys it does not know", () => {
    const dir = tmp();
    const file = path.join(dir, "nested", "config.json");
    saveClientConfig({ url: "http://a", token: "t" }, { path: file });
    expect(statSync(file).mode & 0o777).toBe(0o600);
    writeFileSync(file, JSON.stringify({ url: "http://a", token: "t", python: { timeout: 3 } }));
    saveClientConfig({ token: undefined, project: "p" }, { path: file });
    expect(JSON.parse(readFileSync(file, "utf8"))).toEqual({
      url: "http://a",
      project: "p",
      python: { timeout: 3 },
    });
  });

  it("names a config file it cannot read", () => {
    const dir = tmp();
    const file = path.join(dir, "config.json");
    writeFileSync(file, "{not json");
    expect(() => loadClientConfig({ env: { DENV_CONFIG: file } })).toThrow(
      `the denv config ${file} is not JSON; fix or remove it`,
    );
    writeFileSync(file, JSON.stringify({ url: 3 }));
    expect(() => loadClientConfig({ env: { DENV_CONFIG: file } })).toThrow(
      /'url' in the denv config .* is not a string/,
    );
  });
});
