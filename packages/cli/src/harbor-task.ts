import { existsSync, readdirSync, statSync } from "node:fs";
import { HarborTaskMessages as M } from "@denv/spec";
import { CliError } from "./exit-codes.js";

/**
 * What `denv export harbor` (export-harbor-task.ts) needs of a Harbor task's layout: task.toml,
 * instruction.md, environment/{Dockerfile | docker-compose.yaml with service main},
 * tests/test.sh, solution/solve.sh; in a Harbor container /logs/verifier/reward.txt|json, /tests,
 * /solution. The other direction, `denv import harbor`, is the denv Python package's
 * (python/src/denv/harbor/_import.py, the Harbor adapter's mapping): commands/import.ts runs it.
 */

export const DEFAULT_WORKDIR = "/workspace";

/** A YAML mapping, or {} for anything else. */
export function asRecord(v: unknown): Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v) ? (v as Record<string, unknown>) : {};
}

/** Refuses to write into a folder that holds anything. */
export function assertEmpty(dir: string, label: string): void {
  if (existsSync(dir) && readdirSync(dir).length > 0) throw new CliError("conflict", M.notEmpty(label));
}

export const isDir = (p: string) => existsSync(p) && statSync(p).isDirectory();
