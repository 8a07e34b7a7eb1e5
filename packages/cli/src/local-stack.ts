import { type ChildProcess, spawn } from "node:child_process";
import { closeSync, existsSync, openSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { CliError } from "./exit-codes.js";

/**
 * The embedded default (`denv up` / `denv down`): a control plane and one denvd on this
 * machine, as background processes whose pid files and logs live in the data folder. They are
 * started as programs, never imported (ARCHITECTURE: nothing imports cp or denvd internals).
 */

export type Role = "cp" | "denvd";

export interface StackPaths {
  dataDir: string;
  log: Record<Role, string>;
  pid: Record<Role, string>;
  /** Written by the control plane on its first start. */
  adminToken: string;
  /** The control plane's own data (its SQLite database). */
  cpData: string;
  denvdState: string;
  /** Marks that the local denvd has joined this control plane (join tokens are single-use). */
  joined: string;
}

export function defaultDataDir(env: NodeJS.ProcessEnv, home = os.homedir()): string {
  const xdg = env.XDG_DATA_HOME;
  return path.join(
    xdg !== undefined && path.isAbsolute(xdg) ? xdg : path.join(home, ".local", "share"),
    "denv",
  );
}

export function stackPaths(dataDir: string): StackPaths {
  return {
    dataDir,
    log: { cp: path.join(dataDir, "cp.log"), denvd: path.join(dataDir, "denvd.log") },
    pid: { cp: path.join(dataDir, "cp.pid"), denvd: path.join(dataDir, "denvd.pid") },
    adminToken: path.join(dataDir, "admin-token"),
    cpData: path.join(dataDir, "cp"),
    denvdState: path.join(dataDir, "denvd"),
    joined: path.join(dataDir, "denvd.joined"),
  };
}

/**
 * The two programs, next to this CLI in the repository (packages/cli/dist -> packages/cp/dist,
 * packages/denvd/dist). DENV_CP_BIN and DENV_DENVD_BIN point elsewhere (another layout, tests).
 */
export function binaries(env: NodeJS.ProcessEnv): Record<Role, string> {
  const packages = fileURLToPath(new URL("../../", import.meta.url));
  return {
    cp: env.DENV_CP_BIN ?? path.join(packages, "cp", "dist", "main.js"),
    denvd: env.DENV_DENVD_BIN ?? path.join(packages, "denvd", "dist", "main.js"),
  };
}

export function checkBinary(role: Role, file: string): void {
  if (!existsSync(file)) {
    const hint = role === "cp" ? "packages/cp" : "packages/denvd";
    throw new CliError(
      "not_found",
      `${file} does not exist; build it with 'npx tsc -b ${hint}' (or set DENV_${role === "cp" ? "CP" : "DENVD"}_BIN)`,
    );
  }
}

export function readPid(file: string): number | undefined {
  try {
    const pid = Number(readFileSync(file, "utf8").trim());
    return Number.isInteger(pid) && pid > 0 ? pid : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Whether a process exists and has not exited. A detached program outlives `denv up`, so when it
 * exits it may stay a zombie under an init that does not reap (a container's PID 1): that
 * counts as gone.
 */
export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
  try {
    // The state is the field after the parenthesised command name.
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3) !== "Z";
  } catch {
    return true;
  }
}

/**
 * Whether `pid` still runs `binary`: a pid file outlives a reboot, and the number may since
 * belong to another program, which must not be signalled. Where /proc is missing, alive() decides.
 */
export function runs(pid: number, binary: string): boolean {
  if (!alive(pid)) return false;
  try {
    return readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0").includes(binary);
  } catch {
    return !existsSync("/proc/self");
  }
}

/**
 * The node options denvd runs with, as deploy/denvd.service starts it (a test holds the two
 * together): its young generation capped at 1 MB, which V8 would otherwise grow to 16 MB and
 * keep while denvd idles (packages/denvd/README.md, "Memory").
 */
export const DENVD_NODE_OPTIONS: readonly string[] = ["--max-semi-space-size=1"];

/**
 * The node options the control plane runs with (`denv up` gives them; give them to node wherever
 * denv-cp runs): its young generation capped at 1 MB, and its old generation let grow by half of
 * what is live before a full GC rather than by V8's default factor (up to 4x). Otherwise a burst
 * of deployments leaves it holding the heap the burst grew to: bench/api at 1,000 hosts x 10
 * environments, 297 -> 145 MB after the setup, 151 -> 119 MB restarted on that state, read-mix
 * p99 unchanged (packages/cp/README.md, "Memory").
 */
export const CP_NODE_OPTIONS: readonly string[] = ["--max-semi-space-size=1", "--heap-growing-percent=50"];

/**
 * Starts a program in the background, detached from this terminal, output appended to `log`;
 * `nodeOptions` go to node before the program.
 */
export function startDetached(
  binary: string,
  args: string[],
  log: string,
  env: NodeJS.ProcessEnv,
  nodeOptions: readonly string[] = [],
): ChildProcess {
  const fd = openSync(log, "a", 0o600);
  try {
    const child = spawn(process.execPath, [...nodeOptions, binary, ...args], {
      detached: true,
      stdio: ["ignore", fd, fd],
      env,
    });
    child.unref();
    return child;
  } finally {
    closeSync(fd);
  }
}

/** Runs a program to its end, output appended to `log`; resolves with its exit code. */
export function runToEnd(
  binary: string,
  args: string[],
  log: string,
  env: NodeJS.ProcessEnv,
): Promise<number> {
  const fd = openSync(log, "a", 0o600);
  return new Promise<number>((resolve, reject) => {
    const child = spawn(process.execPath, [binary, ...args], { stdio: ["ignore", fd, fd], env });
    child.on("error", reject);
    child.on("exit", (code, signal) => resolve(code ?? (signal === null ? 1 : 128)));
  }).finally(() => closeSync(fd));
}

export function writePid(file: string, pid: number): void {
  writeFileSync(file, `${pid}\n`, { mode: 0o644 });
}

/**
 * SIGTERM, then SIGKILL when it is still running after `graceMs`; each signal only while the pid
 * still runs `binary` (once it exits, the kernel may give its number to any process).
 */
export async function stop(pid: number, binary: string, graceMs: number): Promise<"stopped" | "killed"> {
  if (!runs(pid, binary)) return "stopped";
  signal(pid, "SIGTERM");
  const deadline = Date.now() + graceMs;
  while (Date.now() < deadline) {
    if (!runs(pid, binary)) return "stopped";
    await sleep(100);
  }
  if (runs(pid, binary)) signal(pid, "SIGKILL");
  for (let i = 0; i < 100 && runs(pid, binary); i++) await sleep(50);
  return "killed";
}

/** The process group first (what the program started goes too), the process alone as fallback. */
function signal(pid: number, name: NodeJS.Signals): void {
  try {
    process.kill(-pid, name);
  } catch {
    try {
      process.kill(pid, name);
    } catch {
      // already gone
    }
  }
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The last lines of a log, to show why a program did not come up. */
export function tail(file: string, lines = 20): string {
  try {
    const text = readFileSync(file, "utf8").trimEnd().split("\n").slice(-lines);
    return text.map((l) => `  ${l}`).join("\n");
  } catch {
    return "  (no log)";
  }
}

export function removePid(file: string): void {
  rmSync(file, { force: true });
}
