import { type ChildProcess, spawn } from "node:child_process";
import { createWriteStream } from "node:fs";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { memoryOf, sleep } from "../../runtime/dist/host.js";
import { median } from "../../runtime/dist/stats.js";

/**
 * denv-cp as a child process (packages/cp/dist/main.js, the real binary) on a free loopback port
 * with a temporary data dir (its store SQLite there, or the PostgreSQL database given), so its
 * resident memory is its own: VmRSS of its pid.
 */
export interface CpProcess {
  url: string;
  adminToken: string;
  pid: number;
  dataDir: string;
  /** --database-url when it is not the data dir's SQLite file. */
  databaseUrl: string | undefined;
  /** Where it writes a V8 CPU profile when it exits (node --cpu-prof), when asked. */
  cpuProfDir: string | undefined;
  nodeOptions: readonly string[];
  /** Its log (JSON lines, level warn) in the data dir. */
  logFile: string;
  /** Median VmRSS of `samples` readings `everyMs` apart, plus the peak (VmHWM), in bytes. */
  rss(samples?: number, everyMs?: number): Promise<{ rss: number; hwm: number }>;
  alive(): boolean;
  /** What it logged so far. */
  readLog(): Promise<string>;
  /** SIGTERM (graceful close), SIGKILL after 10 s; then removes the data dir unless `keepData`. */
  stop(opts?: { keepData?: boolean }): Promise<void>;
}

export interface CpOptions {
  /** PostgreSQL (an empty database) instead of SQLite in the data dir. */
  databaseUrl?: string;
  /** Profile its CPU (node --cpu-prof) into this directory; the profile is written when it exits. */
  cpuProfDir?: string;
  /** Options for node before the cp's main (V8 flags: `--max-semi-space-size=1`). */
  nodeOptions?: readonly string[];
}

/**
 * Starts denv-cp; `from` restarts on the data dir, the database and the address of a cp stopped
 * with `keepData` (its hosts reconnect to the same URL).
 */
export async function startCp(repoRoot: string, o: CpOptions, from?: CpProcess): Promise<CpProcess> {
  const dataDir = from?.dataDir ?? (await mkdtemp(join(tmpdir(), "denv-bench-cp-")));
  const databaseUrl = from ? from.databaseUrl : o.databaseUrl;
  const cpuProfDir = from ? from.cpuProfDir : o.cpuProfDir;
  const nodeOptions = from ? from.nodeOptions : (o.nodeOptions ?? []);
  const logFile = join(dataDir, "cp.log");
  const main = join(repoRoot, "packages", "cp", "dist", "main.js");
  const listen = from ? new URL(from.url).host : "127.0.0.1:0";
  const child: ChildProcess = spawn(
    process.execPath,
    [
      ...nodeOptions,
      ...(cpuProfDir ? ["--cpu-prof", "--cpu-prof-dir", cpuProfDir] : []),
      main,
      "--listen",
      listen,
      "--data-dir",
      dataDir,
      "--log-level",
      "warn",
      ...(databaseUrl ? ["--database-url", databaseUrl] : []),
    ],
    { stdio: ["ignore", "pipe", "pipe"] },
  );
  const log = createWriteStream(logFile, { flags: "a" });
  child.stderr?.pipe(log);
  let exited = false;
  const exit = new Promise<void>((resolve) => {
    child.once("exit", () => {
      exited = true;
      resolve();
    });
  });
  const stop = async (opts: { keepData?: boolean } = {}) => {
    if (!exited) {
      child.kill("SIGTERM");
      const killer = setTimeout(() => child.kill("SIGKILL"), 10_000);
      await exit;
      clearTimeout(killer);
    }
    await new Promise((r) => log.end(r));
    if (!opts.keepData) await rm(dataDir, { recursive: true, force: true });
  };
  try {
    const url = await new Promise<string>((resolve, reject) => {
      let out = "";
      const timer = setTimeout(
        () => reject(new Error("denv-cp did not say where it listens within 30 s")),
        30_000,
      );
      child.stdout?.on("data", (b: Buffer) => {
        out += b.toString("utf8");
        const m = /listening on (http:\/\/\S+)/.exec(out);
        if (m?.[1]) {
          clearTimeout(timer);
          resolve(m[1]);
        }
      });
      child.once("exit", (code) => {
        clearTimeout(timer);
        reject(new Error(`denv-cp exited (${code}) before listening; see ${logFile}`));
      });
    });
    const adminToken = (await readFile(join(dataDir, "admin-token"), "utf8")).trim();
    const pid = child.pid as number;
    return {
      url,
      adminToken,
      pid,
      dataDir,
      databaseUrl,
      cpuProfDir,
      nodeOptions,
      logFile,
      alive: () => !exited,
      readLog: () => readFile(logFile, "utf8").catch(() => ""),
      async rss(samples = 5, everyMs = 200) {
        const rss: number[] = [];
        let hwm = 0;
        for (let i = 0; i < samples; i++) {
          if (i > 0) await sleep(everyMs);
          const m = await memoryOf(pid);
          rss.push(m.rss);
          hwm = Math.max(hwm, m.hwm);
        }
        return { rss: median(rss), hwm };
      },
      stop,
    };
  } catch (err) {
    await stop();
    throw err;
  }
}

/** VmRSS of a bare `node -e "setInterval(() => {}, 1000)"` after 1.5 s: what any Node process costs. */
export async function bareNodeRss(): Promise<number> {
  const child = spawn(process.execPath, ["-e", "setInterval(() => {}, 1000)"], { stdio: "ignore" });
  try {
    await sleep(1500);
    return (await memoryOf(child.pid as number)).rss;
  } finally {
    child.kill("SIGKILL");
  }
}
