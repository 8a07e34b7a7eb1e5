import { readFileSync } from "node:fs";

/** denvd's own version (package.json), announced in hello. Same path from src/ and dist/. */
export const DENVD_VERSION: string = (
  JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as { version: string }
).version;
