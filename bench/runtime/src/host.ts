import { spawn } from "node:child_process";
import { readFile } from "node:fs/promises";
import { performance } from "node:perf_hooks";

/** Host helpers of the benchmark: programs, timing, process memory. */

export interface RunResult {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs a program without a shell and collects its output. */
export function run(file: string, args: string[], opts: { timeoutMs?: number } = {}): Promise<RunResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(file, args, { stdio: ["ignore", "pipe", "pipe"] });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    child.stdout.on("data", (b: Buffer) => out.push(b));
    child.stderr.on("data", (b: Buffer) => err.push(b));
    const timer = opts.timeoutMs ? setTimeout(() => child.kill("SIGKILL"), opts.timeoutMs) : undefined;
    child.on("error", (e) => {
      if (timer) clearTimeout(timer);
      reject(e);
    });
    child.on("close", (code) => {
      if (timer) clearTimeout(timer);
      resolve({
        code: code ?? 128,
        stdout: Buffer.concat(out).toString("utf8"),
        stderr: Buffer.concat(err).toString("utf8"),
      });
    });
  });
}

/** As `run`; a non-zero exit is an error naming the command. */
export async function runOk(
  file: string,
  args: string[],
  opts: { timeoutMs?: number } = {},
): Promise<string> {
  const r = await run(file, args, opts);
  if (r.code !== 0) {
    throw new Error(`${file} ${args.join(" ")} exited ${r.code}: ${(r.stderr || r.stdout).trim()}`);
  }
  return r.stdout;
}

/** A bash script with pipefail (for pipelines such as the baseline's `tar | zstd`). */
export function bash(script: string, args: string[] = []): Promise<string> {
  return runOk("bash", ["-c", `set -euo pipefail\n${script}`, "bash", ...args]);
}

/** Milliseconds taken by `fn`, and its result. */
export async function timed<T>(fn: () => Promise<T>): Promise<{ ms: number; value: T }> {
  const t0 = performance.now();
  const value = await fn();
  return { ms: performance.now() - t0, value };
}

export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/** Resident and peak resident memory of a process, in bytes (from /proc/PID/status). */
export async function memoryOf(pid: number): Promise<{ rss: number; hwm: number }> {
  const status = await readFile(`/proc/${pid}/status`, "utf8");
  const field = (name: string): number => {
    const m = new RegExp(`^${name}:\\s+(\\d+) kB`, "m").exec(status);
    if (!m?.[1]) throw new Error(`no ${name} in /proc/${pid}/status`);
    return Number(m[1]) * 1024;
  };
  return { rss: field("VmRSS"), hwm: field("VmHWM") };
}

/** Writes back dirty pages so that every measured step starts from the same state. */
export async function settle(ms = 300): Promise<void> {
  await runOk("sync", []);
  await sleep(ms);
}

export function log(line: string): void {
  process.stderr.write(`bench: ${line}\n`);
}
