import { spawnSync } from "node:child_process";
import { copyFileSync, cpSync, existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import net from "node:net";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { home, oneJson, removeTempDirs, repo, tempDir } from "../testing/harness.js";

/**
 * The npm packages as a user gets them (as devcontainers/cli's tests install their packed CLI):
 * `npm pack` of the five packages, one `npm install` of the tarballs into an empty folder, and
 * the installed `denv`, `denv-cp` and `denvd` run from there, so that a file missing from a
 * package's `files` or a dependency missing from its package.json fails here. Then denvd's
 * single-file bundle (dist/bundle/denvd.mjs), copied alone into an empty folder, runs its
 * --version and, with the installed control plane, `denv up` brings a host online.
 *
 * The install runs from npm's cache (--prefer-offline) and without install scripts: the only
 * script that matters is better-sqlite3's, which compiles SQLite (minutes on two cores) or
 * downloads a prebuilt add-on from GitHub; the add-on this checkout built is copied in instead,
 * after checking the installed better-sqlite3 is the same version.
 */

const PACKAGES = ["spec", "sdk", "cli", "cp", "denvd"];
const run = (cmd: string, args: string[], cwd: string, env: NodeJS.ProcessEnv = process.env) =>
  spawnSync(cmd, args, { cwd, env, encoding: "utf8" });
const pkgVersion = (file: string) => (JSON.parse(readFileSync(file, "utf8")) as { version: string }).version;

let tarballs: { filename: string; files: { path: string }[] }[] = [];
let installed: string;
let bin: (name: string) => string;
let bundle: string;
const started: number[] = [];

beforeAll(() => {
  const info = run(process.execPath, ["scripts/build-info.mjs"], repo);
  expect(info.status, info.stderr).toBe(0);
  const recorded = JSON.parse(readFileSync(path.join(repo, "packages/cli/dist/build.json"), "utf8")) as {
    commit?: string;
  };
  built = recorded.commit === undefined ? "" : ` (${recorded.commit})`;
  const tsc = createRequire(import.meta.url).resolve("typescript/bin/tsc");
  const build = run(process.execPath, [tsc, "-b", ...PACKAGES.map((p) => `packages/${p}`)], repo);
  expect(build.status, `${build.stdout}${build.stderr}`).toBe(0);
  const bundled = run(process.execPath, ["packages/denvd/scripts/bundle.mjs"], repo);
  expect(bundled.status, bundled.stderr).toBe(0);

  const packs = tempDir("packs");
  const pack = run(
    "npm",
    ["pack", "--json", "--pack-destination", packs, ...PACKAGES.flatMap((p) => ["-w", `packages/${p}`])],
    repo,
  );
  expect(pack.status, pack.stderr).toBe(0);
  tarballs = JSON.parse(pack.stdout);

  installed = tempDir("installed");
  writeFileSync(path.join(installed, "package.json"), '{ "private": true }\n');
  const install = run(
    "npm",
    [
      "install",
      "--prefer-offline",
      "--ignore-scripts",
      "--no-audit",
      "--no-fund",
      ...tarballs.map((t) => path.join(packs, t.filename)),
    ],
    installed,
  );
  expect(install.status, install.stderr).toBe(0);
  const sqlite = path.join(installed, "node_modules/better-sqlite3");
  const ours = path.join(repo, "node_modules/better-sqlite3");
  expect(pkgVersion(path.join(sqlite, "package.json"))).toBe(pkgVersion(path.join(ours, "package.json")));
  mkdirSync(path.join(sqlite, "build/Release"), { recursive: true });
  copyFileSync(
    path.join(ours, "build/Release/better_sqlite3.node"),
    path.join(sqlite, "build/Release/better_sqlite3.node"),
  );
  bin = (name) => path.join(installed, "node_modules/.bin", name);

  const alone = tempDir("bundle");
  bundle = path.join(alone, "denvd.mjs");
  cpSync(path.join(repo, "packages/denvd/dist/bundle/denvd.mjs"), bundle);
}, 180_000);

afterAll(() => {
  for (const pid of started) {
    try {
      if (readFileSync(`/proc/${pid}/cmdline`, "utf8").includes(installed)) process.kill(pid, "SIGKILL");
    } catch {
      // gone
    }
  }
  removeTempDirs();
});

// The commit build-info.mjs recorded in each dist/build.json (a checkout's HEAD may move after).
let built = "";
const commit = () => built;

describe("the packed npm packages", () => {
  it("hold their built code and no tests, sources or source maps", () => {
    expect(tarballs.map((t) => t.filename).sort()).toEqual(PACKAGES.map((p) => `denv-${p}-0.1.0.tgz`).sort());
    for (const t of tarballs) {
      const paths = t.files.map((f) => f.path);
      expect(paths, t.filename).toContain("package.json");
      expect(paths, t.filename).toContain("README.md");
      expect(
        paths.filter((p) => /\.test\.|\.map$|^src\/|tsbuildinfo|\/e2e\//.test(p)),
        t.filename,
      ).toEqual([]);
    }
  });

  it("install into an empty folder, and denv --help and denv validate run from it", () => {
    const help = run(bin("denv"), ["--help"], installed);
    expect(help.status, help.stderr).toBe(0);
    expect(help.stdout).toMatch(/^USAGE\n {2}denv <command>/m);
    const example = path.join(repo, "examples/quickstart/compose.yaml");
    const validate = run(bin("denv"), ["validate", example], installed);
    expect(validate.status, validate.stderr).toBe(0);
    expect(validate.stdout.split("\n")[0]).toBe(`${example} is valid`);
  });

  it.each([
    ["denv", "cli"],
    ["denv-cp", "cp"],
    ["denvd", "denvd"],
  ])("installs %s as a command that names its version", (program, pkg) => {
    const r = run(bin(program), ["--version"], installed);
    expect(r.stderr).toBe("");
    expect(r.stdout).toBe(
      `${program} ${pkgVersion(path.join(repo, "packages", pkg, "package.json"))}${commit()}\n`,
    );
  });
});

const docker = existsSync("/var/run/docker.sock");

async function freePort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as net.AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

describe("denvd's single-file bundle, alone in a folder", () => {
  it("names its version without a package.json beside it", () => {
    const r = run(process.execPath, [bundle, "--version"], path.dirname(bundle));
    expect(r.stderr).toBe("");
    expect(r.stdout).toBe(`denvd ${pkgVersion(path.join(repo, "packages/denvd/package.json"))}${commit()}\n`);
  });

  it.skipIf(!docker)(
    `joins the installed control plane and comes online${docker ? "" : " (skipped: no Docker socket)"}`,
    async () => {
      const env = { PATH: process.env.PATH ?? "", HOME: home(), DENV_DENVD_BIN: bundle };
      const data = tempDir("up");
      const up = run(
        bin("denv"),
        ["up", "--data-dir", data, "--listen", `127.0.0.1:${await freePort()}`, "--store", "copy", "--json"],
        installed,
        env,
      );
      const log = (role: string) => {
        const file = path.join(data, `${role}.log`);
        return existsSync(file) ? readFileSync(file, "utf8") : "";
      };
      expect(up.status, `${up.stderr}\n${log("cp")}\n${log("denvd")}`).toBe(0);
      const { pids } = oneJson(up.stdout) as { pids: { cp: number; denvd: number } };
      started.push(pids.cp, pids.denvd);
      expect(readFileSync(`/proc/${pids.denvd}/cmdline`, "utf8").split("\0")).toContain(bundle);
      expect(readFileSync(`/proc/${pids.cp}/cmdline`, "utf8")).toContain(
        path.join(installed, "node_modules/@denv/cp/dist/main.js"),
      );
      const hosts = run(bin("denv"), ["hosts", "list", "--json"], installed, env);
      expect(hosts.status, hosts.stderr).toBe(0);
      const list = oneJson(hosts.stdout).hosts as { status: string; version: string }[];
      expect(list.map((h) => h.status)).toEqual(["online"]);
      const down = run(bin("denv"), ["down", "--data-dir", data], installed, env);
      expect(down.status, down.stderr).toBe(0);
    },
    60_000,
  );
});
