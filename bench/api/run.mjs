#!/usr/bin/env node
// Builds the API benchmark (and what it imports: the packages and bench/runtime's helpers) with
// `tsc -b bench/api`, then runs it.
//   node bench/api/run.mjs [--smoke] [--help]
import { spawnSync } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, "..", "..");
const tsc = join(root, "node_modules", "typescript", "bin", "tsc");
const build = spawnSync(process.execPath, [tsc, "-b", here], { stdio: "inherit" });
if (build.status !== 0) {
  console.error("bench: the build failed (npm ci first?)");
  process.exit(build.status ?? 1);
}
await import("./dist/main.js");
