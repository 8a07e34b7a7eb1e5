import { programVersion } from "@denv/spec/program-version";

/** `denv 0.1.0 (abc1234)`: package.json's version and the commit dist/build.json records. */
export const denvVersion = (): string => programVersion("denv", new URL("./", import.meta.url));
