import { packageVersion, programVersion } from "@denv/spec/program-version";

/** denvd's own version (package.json), announced in hello. Same path from src/ and dist/. */
export const DENVD_VERSION: string = packageVersion(new URL("../../package.json", import.meta.url));

/** `denvd 0.1.0 (abc1234)`: the version and the commit dist/build.json records. */
export const denvdVersion = (): string => programVersion("denvd", new URL("../", import.meta.url));
