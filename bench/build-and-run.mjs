// What every bench/<name>/run.mjs does: build the benchmark (and what it imports: the packages,
// bench/runtime's helpers) with `tsc -b`, then run its dist/main.js.
import { spawnSync } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

/**
 * @param {string} runUrl import.meta.url of the benchmark's run.mjs
 * @param {string} [project] the tsc project to build (default: the benchmark's folder)
 */
export async function buildAndRun(runUrl, project) {
  const here = dirname(fileURLToPath(runUrl));
  const root = join(here, "..", "..");
  const tsc = join(root, "node_modules", "typescript", "bin", "tsc");
  const build = spawnSync(process.execPath, [tsc, "-b", project ?? here], { stdio: "inherit" });
  if (build.status !== 0) {
    console.error("bench: the build failed (npm ci first?)");
    process.exit(build.status ?? 1);
  }
  await import(pathToFileURL(join(here, "dist", "main.js")).href);
}
