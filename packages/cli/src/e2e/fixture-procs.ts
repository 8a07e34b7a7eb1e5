import { type ChildProcess, spawn } from "node:child_process";
import { closeSync, copyFileSync, existsSync, mkdirSync, openSync, readFileSync } from "node:fs";
import http from "node:http";
import net from "node:net";
import path from "node:path";

/** The programs the hosts fixture (hosts-fixture.ts) starts, and how it waits for them and stops them. */

/**
 * DENV_E2E_DEBUG_DIR=DIR (a debugging aid, for profiling a benchmark): the cp and every
 * `denvd run` start under `node --cpu-prof`, each writing its profile into DIR/<cp|name>/ when it
 * exits, and close() copies their logs into DIR before it removes them.
 */
export function debugFlags(proc: string): string[] {
  const dir = process.env.DENV_E2E_DEBUG_DIR;
  return dir ? ["--cpu-prof", `--cpu-prof-dir=${path.join(path.resolve(dir), proc)}`] : [];
}

export function keepLog(log: string, as: string): void {
  const dir = process.env.DENV_E2E_DEBUG_DIR;
  if (!dir || !existsSync(log)) return;
  mkdirSync(dir, { recursive: true });
  copyFileSync(log, path.join(dir, as));
}

/** A program this fixture started, with its exit as a promise. */
export interface Proc {
  child: ChildProcess;
  exited: Promise<void>;
}

export function startProc(file: string, args: string[], log: string, env: NodeJS.ProcessEnv): Proc {
  const fd = openSync(log, "a", 0o600);
  try {
    const child = spawn(file, args, { stdio: ["ignore", fd, fd], env });
    const exited = new Promise<void>((resolve) => {
      child.once("exit", () => resolve());
      child.once("error", () => resolve());
    });
    return { child, exited };
  } finally {
    closeSync(fd);
  }
}

export const running = (p: Proc | undefined): p is Proc =>
  p !== undefined && p.child.exitCode === null && p.child.signalCode === null;

/** `signal`, then SIGKILL when it has not exited after `graceMs`. */
export async function stopProc(p: Proc | undefined, signal: NodeJS.Signals, graceMs: number): Promise<void> {
  if (!running(p)) return;
  p.child.kill(signal);
  const timer = new Promise<"late">((r) => setTimeout(() => r("late"), graceMs).unref());
  if ((await Promise.race([p.exited, timer])) === "late") {
    p.child.kill("SIGKILL");
    await p.exited;
  }
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function tail(file: string, lines = 30): string {
  try {
    return readFileSync(file, "utf8").trimEnd().split("\n").slice(-lines).join("\n");
  } catch {
    return "(no log)";
  }
}

/** Polls until `ready` is true; fails with `log`'s end when `proc` exits first or time runs out. */
export async function waitUntil(
  what: string,
  timeoutMs: number,
  ready: () => Promise<boolean>,
  proc?: { p: Proc | undefined; log: string },
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let last = "";
  while (Date.now() < deadline) {
    try {
      if (await ready()) return;
    } catch (err) {
      last = (err as Error).message;
    }
    if (proc && !running(proc.p))
      throw new Error(`exited while waiting for ${what}; the end of ${proc.log}:\n${tail(proc.log)}`);
    await sleep(100);
  }
  throw new Error(
    `timed out after ${timeoutMs / 1000}s waiting for ${what}${last ? ` (${last})` : ""}${proc ? `; the end of ${proc.log}:\n${tail(proc.log)}` : ""}`,
  );
}

/** GET /_ping on an engine's socket answers OK. */
export function pingEngine(socket: string): Promise<boolean> {
  return new Promise((resolve) => {
    const req = http.get({ socketPath: socket, path: "/_ping", timeout: 2_000 }, (res) => {
      res.resume();
      resolve(res.statusCode === 200);
    });
    req.on("error", () => resolve(false));
    req.on("timeout", () => req.destroy());
  });
}

export function freePort(host: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.listen(0, host, () => {
      const addr = srv.address();
      const port = typeof addr === "object" && addr ? addr.port : 0;
      srv.close(() => resolve(port));
    });
    srv.on("error", reject);
  });
}

/** Environment variables of this process, without any that would point denv or docker elsewhere. */
export function cleanEnv(): NodeJS.ProcessEnv {
  return Object.fromEntries(
    Object.entries(process.env).filter(([k]) => !/^(DENV_|DENVD_|DOCKER_)/.test(k)),
  ) as NodeJS.ProcessEnv;
}
