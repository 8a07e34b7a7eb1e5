import { readFileSync } from "node:fs";
import { BUILD_INFO_FILE, versionLine } from "./build-info.js";

/**
 * Node-only (its own entry, `@denv/spec/program-version`, so that the rest of spec stays free
 * of node:fs): the version line of a binary package, from its package.json and the
 * dist/build.json its build wrote.
 */

/** The commit a build.json records; none when the file is absent (a build that skipped scripts/build-info.mjs). */
export function buildCommit(distDir: URL): string | undefined {
  let text: string;
  try {
    text = readFileSync(new URL(BUILD_INFO_FILE, distDir), "utf8");
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw err;
  }
  return (JSON.parse(text) as { commit?: string }).commit;
}

/** A package's version, from its package.json. */
export function packageVersion(packageJson: URL): string {
  return (JSON.parse(readFileSync(packageJson, "utf8")) as { version: string }).version;
}

/** `PROGRAM 0.1.0 (abc1234)` for the package whose dist/ is `distDir` (package.json beside it). */
export function programVersion(program: string, distDir: URL): string {
  return versionLine(program, packageVersion(new URL("../package.json", distDir)), buildCommit(distDir));
}
