import { readFileSync } from "node:fs";
import { BUILD_INFO_FILE } from "@denv/spec";

/** denvd's own version (package.json), announced in hello. Same path from src/ and dist/. */
export const DENVD_VERSION: string = (
  JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as { version: string }
).version;

/** The commit dist/build.json records (scripts/build-info.mjs); none when the build skipped it. */
export function buildCommit(): string | undefined {
  let text: string;
  try {
    text = readFileSync(new URL(`../${BUILD_INFO_FILE}`, import.meta.url), "utf8");
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw err;
  }
  return (JSON.parse(text) as { commit?: string }).commit;
}
