/**
 * What `denv --version`, `denv-cp --version` and `denvd --version` print: the program, its
 * package version and, when it was built from a git checkout, the commit
 * (`denv 0.1.0 (abc1234)`). The commit comes from dist/build.json, which the build writes
 * (scripts/build-info.mjs).
 */
export const versionLine = (program: string, version: string, commit: string | undefined): string =>
  commit === undefined ? `${program} ${version}` : `${program} ${version} (${commit})`;

/** The name of the file the build writes in each binary package's dist/. */
export const BUILD_INFO_FILE = "build.json";
