import { existsSync, readdirSync, statSync } from "node:fs";
import { HarborTaskMessages as M } from "@denv/spec";
import { CliError } from "./exit-codes.js";

/**
 * Harbor task folder <-> denv project folder, without Harbor (`denv import harbor`,
 * `denv export harbor`; see import-harbor-task.ts and export-harbor-task.ts). Layout of a Harbor
 * task: task.toml, instruction.md, environment/{Dockerfile | docker-compose.yaml with service main},
 * tests/test.sh, solution/solve.sh. In a Harbor container: /logs/verifier/reward.txt|json, /tests,
 * /solution. What both directions share is here.
 */

export const AGENT_UID = "1000";
export const VERIFIER_UID = "1001";
export const DEFAULT_WORKDIR = "/workspace";

/** FILE, which the task or project must have (LABEL names it in the refusal). */
export function need(file: string, label: string): string {
  if (!existsSync(file)) throw new CliError("invalid_request", M.missingFile(label));
  return file;
}

/** A YAML or TOML mapping, or {} for anything else. */
export function asRecord(v: unknown): Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v) ? (v as Record<string, unknown>) : {};
}

/** Refuses to write into a folder that holds anything. */
export function assertEmpty(dir: string, label: string): void {
  if (existsSync(dir) && readdirSync(dir).length > 0) throw new CliError("conflict", M.notEmpty(label));
}

export const isDir = (p: string) => existsSync(p) && statSync(p).isDirectory();
