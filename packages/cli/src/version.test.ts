import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { beforeAll, describe, expect, it } from "vitest";
import { repo } from "./testing/harness.js";

/**
 * `--version` of the three binaries, built as `npm run build` builds them: scripts/build-info.mjs
 * records the checkout's commit in each dist/build.json, then tsc.
 */

const run = (cmd: string, args: string[]) => spawnSync(cmd, args, { cwd: repo, encoding: "utf8" });
const version = (pkg: string) =>
  (JSON.parse(readFileSync(path.join(repo, "packages", pkg, "package.json"), "utf8")) as { version: string })
    .version;

let commit: string | undefined;

beforeAll(() => {
  const info = run(process.execPath, ["scripts/build-info.mjs"]);
  expect(info.status, info.stderr).toBe(0);
  const tsc = createRequire(import.meta.url).resolve("typescript/bin/tsc");
  const build = run(process.execPath, [tsc, "-b", "packages/cli", "packages/cp", "packages/denvd"]);
  expect(build.status, `${build.stdout}${build.stderr}`).toBe(0);
  const git = run("git", ["rev-parse", "--short", "HEAD"]);
  commit = git.status === 0 ? git.stdout.trim() : undefined;
});

describe("--version", () => {
  it.each([
    ["denv", "cli"],
    ["denv-cp", "cp"],
    ["denvd", "denvd"],
  ])("%s names its package version and the commit it was built from", (program, pkg) => {
    const r = run(process.execPath, [path.join(repo, "packages", pkg, "dist/main.js"), "--version"]);
    expect(r.stderr).toBe("");
    expect(r.status).toBe(0);
    const suffix = commit === undefined ? "" : ` (${commit})`;
    expect(r.stdout).toBe(`${program} ${version(pkg)}${suffix}\n`);
    if (commit !== undefined) expect(r.stdout).toMatch(/^\S+ \d+\.\d+\.\d+ \([0-9a-f]{7,}\)\n$/);
  });

  it("records the commit and nothing else, so that two builds of one commit are identical", () => {
    const text = readFileSync(path.join(repo, "packages/cli/dist/build.json"), "utf8");
    expect(text).toBe(`${JSON.stringify(commit === undefined ? {} : { commit })}\n`);
  });
});
