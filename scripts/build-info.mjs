#!/usr/bin/env node
// Records the git commit a build is made from, for `--version`: writes dist/build.json
// ({"commit":"abc1234"}) in each package with a binary. `npm run build` runs it before tsc.
// The file holds the commit and nothing else (no time, no host, no user), so two builds of
// one commit are byte-identical. Outside a git checkout (an unpacked tarball, a copy without
// .git) it writes {} and the binaries print their package version alone.
import { spawnSync } from "node:child_process";
import { mkdirSync, renameSync, writeFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const repo = path.dirname(path.dirname(fileURLToPath(import.meta.url)));
const git = spawnSync("git", ["rev-parse", "--short", "HEAD"], { cwd: repo, encoding: "utf8" });
const commit = git.status === 0 ? git.stdout.trim() : undefined;
const text = `${JSON.stringify(commit === undefined ? {} : { commit })}\n`;
for (const pkg of ["cli", "cp", "denvd"]) {
  const dist = path.join(repo, "packages", pkg, "dist");
  mkdirSync(dist, { recursive: true });
  // Written aside and renamed: a test building at the same time never reads half a file.
  const tmp = path.join(dist, `build.json.${process.pid}`);
  writeFileSync(tmp, text);
  renameSync(tmp, path.join(dist, "build.json"));
}
