import { programVersion } from "@denv/spec/program-version";

/** `denv-cp 0.1.0 (abc1234)`: package.json's version and the commit dist/build.json records. */
export const cpVersion = (): string => programVersion("denv-cp", new URL("./", import.meta.url));
