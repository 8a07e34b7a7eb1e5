import { readFileSync } from "node:fs";
import { BUILD_INFO_FILE, versionLine } from "@denv/spec";

/** `denv-cp 0.1.0 (abc1234)`: package.json's version and the commit dist/build.json records. */
export function cpVersion(): string {
  const pkg = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8")) as {
    version: string;
  };
  return versionLine("denv-cp", pkg.version, buildCommit(new URL(BUILD_INFO_FILE, import.meta.url)));
}

/** The commit in a build.json; none when the file is absent (a build that skipped scripts/build-info.mjs). */
function buildCommit(file: URL): string | undefined {
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw err;
  }
  return (JSON.parse(text) as { commit?: string }).commit;
}
