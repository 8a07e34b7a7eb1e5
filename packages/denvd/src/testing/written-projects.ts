import { rm } from "node:fs/promises";

/**
 * The project folders writeProject made in this test file, removed after it by the setup file
 * every vitest file loads (testing/vitest-setup.ts). Kept apart from the harness so that the setup
 * loads nothing else, and outside vitest (bench/ imports the harness) nothing is registered.
 */
const written = new Set<string>();

export function rememberProject(dir: string): void {
  written.add(dir);
}

export async function removeWrittenProjects(): Promise<void> {
  const dirs = [...written];
  written.clear();
  await Promise.all(dirs.map((d) => rm(d, { recursive: true, force: true })));
}
