import { versionLine } from "@denv/spec/build-info";
import { packageVersion, programVersion } from "@denv/spec/program-version";

/**
 * The single-file bundle (scripts/bundle.mjs) has no package.json or dist/build.json beside it:
 * esbuild writes both into it as this constant, undefined when denvd runs from dist/.
 */
declare const DENVD_BUNDLED_VERSION: { version: string; commit?: string } | undefined;
const bundled = typeof DENVD_BUNDLED_VERSION === "undefined" ? undefined : DENVD_BUNDLED_VERSION;

/** denvd's own version (package.json), announced in hello. Same path from src/ and dist/. */
export const DENVD_VERSION: string =
  bundled?.version ?? packageVersion(new URL("../../package.json", import.meta.url));

/** `denvd 0.1.0 (abc1234)`: the version and the commit dist/build.json records. */
export const denvdVersion = (): string =>
  bundled !== undefined
    ? versionLine("denvd", bundled.version, bundled.commit)
    : programVersion("denvd", new URL("../", import.meta.url));
