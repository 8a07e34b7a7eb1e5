import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs";
import { createRequire } from "node:module";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

/**
 * What the CLI's tests share: they run the built CLI as a user would
 * (`node packages/cli/dist/denv.mjs`, the bin), asynchronously, so that a fake control plane in the
 * test process can answer it.
 */

export const repo = fileURLToPath(new URL("../../../../", import.meta.url));
export const cliPath = path.join(repo, "packages/cli/dist/denv.mjs");

/** Builds the CLI (and the SDK and spec it uses); the tests run what a user runs. */
export function buildCli(): void {
  const tsc = createRequire(import.meta.url).resolve("typescript/bin/tsc");
  const build = spawnSync(process.execPath, [tsc, "-b", "packages/cli"], { cwd: repo, encoding: "utf8" });
  if (build.status !== 0) throw new Error(`tsc -b packages/cli failed:\n${build.stdout}${build.stderr}`);
}

export interface Run {
  status: number | null;
  stdout: string;
  stderr: string;
}

export interface RunOptions {
  env?: Record<string, string>;
  /** Written to stdin, which is then closed (stdin is /dev/null without it). */
  input?: string | Buffer;
  cwd?: string;
}

let root: string | undefined;

/** A fresh folder under this test file's own temporary folder (removed by removeTempDirs). */
export function tempDir(prefix: string): string {
  root ??= mkdtempSync(path.join(os.tmpdir(), "denv-cli-test-"));
  return mkdtempSync(path.join(root, `${prefix}-`));
}

export function removeTempDirs(): void {
  if (root !== undefined) rmSync(root, { recursive: true, force: true });
  root = undefined;
}

/** A fresh HOME, so that no test reads or writes a real config file. */
export function home(): string {
  return tempDir("home");
}

export function denv(args: string[], options: RunOptions = {}): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [cliPath, ...args], {
      cwd: options.cwd ?? os.tmpdir(),
      env: { PATH: process.env.PATH ?? "", HOME: home(), ...options.env },
      stdio: [options.input === undefined ? "ignore" : "pipe", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout?.on("data", (b: Buffer) => {
      stdout += b.toString();
    });
    child.stderr?.on("data", (b: Buffer) => {
      stderr += b.toString();
    });
    child.on("error", reject);
    child.on("close", (status) => resolve({ status, stdout, stderr }));
    if (options.input !== undefined) child.stdin?.end(options.input);
  });
}

/** Exactly one JSON object on stdout. */
export function oneJson(stdout: string): Record<string, unknown> {
  const lines = stdout.trimEnd().split("\n");
  if (lines.length !== 1)
    throw new Error(`expected one line of JSON on stdout, got ${lines.length}:\n${stdout}`);
  const value: unknown = JSON.parse(lines[0] ?? "");
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new Error(`expected a JSON object on stdout, got: ${stdout}`);
  }
  return value as Record<string, unknown>;
}

/** The Python `denv import` runs with in tests: DENV_PYTHON, else the repository's venv (scripts/setup-python). */
export const python = process.env.DENV_PYTHON ?? path.join(repo, "python/.venv/bin/python");
/** That Python, with the denv package of the repository these tests run in ahead of whatever the venv installed. */
export const pythonEnv = { DENV_PYTHON: python, PYTHONPATH: path.join(repo, "python/src") };

/** A project folder's files (relative path -> text), for denv's compose validator. */
export function projectFiles(dir: string, base = dir): Record<string, string> {
  const out: Record<string, string> = {};
  for (const name of readdirSync(dir)) {
    const p = path.join(dir, name);
    if (statSync(p).isDirectory()) Object.assign(out, projectFiles(p, base));
    else out[path.relative(base, p)] = readFileSync(p, "utf8");
  }
  return out;
}
