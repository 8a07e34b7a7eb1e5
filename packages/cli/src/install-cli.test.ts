import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, symlinkSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { removeTempDirs, repo, tempDir } from "./testing/harness.js";

/**
 * scripts/install-cli, the README's one-line install from a checkout, into a PREFIX of its own:
 * afterwards denv, denv-cp and denvd are commands on PATH that run this checkout's build.
 */

const script = path.join(repo, "scripts/install-cli");
const PROGRAMS = ["denv", "denv-cp", "denvd"] as const;

function sh(command: string, args: string[], env: Record<string, string> = {}) {
  const r = spawnSync(command, args, {
    cwd: repo,
    encoding: "utf8",
    env: { PATH: process.env.PATH ?? "", HOME: tempDir("home"), ...env },
  });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

beforeAll(() => {
  // As `npm run build` builds: the commit first, then the three programs.
  expect(sh(process.execPath, ["scripts/build-info.mjs"]).status).toBe(0);
  const tsc = createRequire(import.meta.url).resolve("typescript/bin/tsc");
  const build = sh(process.execPath, [tsc, "-b", "packages/cli", "packages/cp", "packages/denvd"]);
  expect(build.status, `${build.stdout}${build.stderr}`).toBe(0);
});

afterAll(removeTempDirs);

describe("scripts/install-cli", () => {
  it("puts denv, denv-cp and denvd on PATH, and they run this checkout's build", () => {
    const prefix = tempDir("prefix");
    const bin = path.join(prefix, "bin");
    const r = sh(script, [], { PREFIX: prefix, PATH: `${bin}:${process.env.PATH ?? ""}` });
    expect(r.stderr).toBe("");
    expect(r.status).toBe(0);
    for (const name of PROGRAMS) expect(r.stdout).toContain(`installed ${path.join(bin, name)} -> `);

    const version = sh(path.join(bin, "denv"), ["--version"]);
    expect(version.status).toBe(0);
    expect(version.stdout).toMatch(/^denv \d+\.\d+\.\d+( \([0-9a-f]+\))?\n$/);
    // By name, through PATH, as a user types it.
    const onPath = { PATH: `${bin}:${process.env.PATH ?? ""}` };
    for (const name of PROGRAMS) {
      const v = sh("sh", ["-c", `${name} --version`], onPath);
      expect(v.stderr, name).toBe("");
      expect(v.stdout.startsWith(`${name} `), name).toBe(true);
    }
    const valid = sh("sh", ["-c", "denv validate examples/quickstart/compose.yaml"], onPath);
    expect(valid.stderr).toBe("");
    expect(valid.status).toBe(0);
    expect(valid.stdout).toContain("compose.yaml is valid");
  });

  it("says when the bin folder is not on PATH, runs again over its own wrappers and replaces a symlink", () => {
    const prefix = tempDir("prefix");
    const bin = path.join(prefix, "bin");
    mkdirSync(bin);
    // deploy/install.sh links denvd into the bin folder.
    symlinkSync(path.join(repo, "packages/denvd/dist/main.js"), path.join(bin, "denvd"));
    const first = sh(script, [], { PREFIX: prefix });
    expect(first.status).toBe(0);
    expect(first.stderr).toContain(`${bin} is not on PATH`);
    const again = sh(script, [], { PREFIX: prefix });
    expect(again.status).toBe(0);
    expect(readFileSync(path.join(bin, "denvd"), "utf8")).toContain("# Written by scripts/install-cli");
  });

  it("leaves a file it did not write unless --force, and --uninstall removes only its own", () => {
    const prefix = tempDir("prefix");
    const bin = path.join(prefix, "bin");
    mkdirSync(bin);
    writeFileSync(path.join(bin, "denv"), "#!/bin/sh\necho another denv\n");
    const refused = sh(script, [], { PREFIX: prefix });
    expect(refused.status).toBe(1);
    expect(refused.stderr).toContain(
      `${path.join(bin, "denv")} exists and is not a wrapper this script wrote`,
    );
    expect(existsSync(path.join(bin, "denv-cp"))).toBe(false);
    expect(sh(script, ["--force"], { PREFIX: prefix }).status).toBe(0);
    writeFileSync(path.join(bin, "other"), "mine\n");
    const removed = sh(script, ["--uninstall"], { PREFIX: prefix });
    expect(removed.status).toBe(0);
    for (const name of PROGRAMS) expect(existsSync(path.join(bin, name)), name).toBe(false);
    expect(readFileSync(path.join(bin, "other"), "utf8")).toBe("mine\n");
  });
});
