import { spawn } from "node:child_process";
import { rm } from "node:fs/promises";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { Labels } from "@denv/spec";
import type { DockerClient } from "../../docker/docker-client.js";
import { run } from "../../host/run.js";
import { DockerHostRuntime } from "../../runtime/docker-host-runtime.js";
import { Runtime } from "../../runtime/runtime.js";
import { openTestRuntime, writeProject } from "../../testing/harness.js";
import { type Daemon, startDaemon } from "../daemon.js";
import type { Log } from "../log.js";
import { FakeCp } from "./fake-cp.js";

/** The repository root and denvd's built entry point (tests that spawn it build first). */
export const REPO = fileURLToPath(new URL("../../../../../", import.meta.url));
export const DENVD_MAIN = join(REPO, "packages/denvd/dist/main.js");

/** Builds spec and denvd so that dist/main.js is current. */
export async function buildDenvd(): Promise<void> {
  const r = await run("npx", ["tsc", "-b", "packages/spec", "packages/denvd"], { timeoutMs: 300_000 }).catch(
    (err: Error) => ({ code: 1, stdout: "", stderr: err.message }),
  );
  if (r.code !== 0) throw new Error(`build failed: ${r.stdout}${r.stderr}`);
}

/** Runs `node dist/main.js ...args` to completion. */
export function denvd(
  args: string[],
  env: Record<string, string> = {},
): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [DENVD_MAIN, ...args], {
      cwd: REPO,
      env: { PATH: "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", ...env },
      stdio: ["ignore", "pipe", "pipe"],
    });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    child.stdout.on("data", (b: Buffer) => out.push(b));
    child.stderr.on("data", (b: Buffer) => err.push(b));
    child.on("error", reject);
    child.on("close", (code) =>
      resolve({
        code: code ?? 1,
        stdout: Buffer.concat(out).toString(),
        stderr: Buffer.concat(err).toString(),
      }),
    );
  });
}

/** A test runtime (own host id and state dir), a fake control plane, and denvd's agent between them. */
export interface TestHost extends AsyncDisposable {
  rt: Runtime;
  cp: FakeCp;
  daemon: Daemon;
  logs: string[];
}

export async function startTestHost(opts: { heartbeatMs?: number } = {}): Promise<TestHost> {
  const rt = await openTestRuntime();
  const cp = await FakeCp.start({ hostId: rt.host.hostId });
  const logs: string[] = [];
  const log: Log = (event, fields) => logs.push(`${event} ${JSON.stringify(fields ?? {})}`);
  const daemon = await startDaemon({
    runtime: new DockerHostRuntime(rt),
    host: { url: cp.url, credential: cp.credential },
    labels: { zone: "test", disk: "ssd" },
    log,
    ...(opts.heartbeatMs !== undefined ? { heartbeatMs: opts.heartbeatMs } : {}),
    backoff: { initialMs: 50, maxMs: 500 },
  });
  await cp.waitFor((f) => f.type === "hello");
  return {
    rt,
    cp,
    daemon,
    logs,
    async [Symbol.asyncDispose]() {
      await daemon.stop(1_000);
      await cp.close();
      await (rt as Runtime & AsyncDisposable)[Symbol.asyncDispose]();
    },
  };
}

/** A tar of a directory, as the control plane would stream a project's source. */
export async function tarOf(dir: string, gzip: boolean): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const child = spawn("tar", ["-C", dir, gzip ? "-czf" : "-cf", "-", "."], {
      stdio: ["ignore", "pipe", "inherit"],
    });
    const out: Buffer[] = [];
    child.stdout.on("data", (b: Buffer) => out.push(b));
    child.on("error", reject);
    child.on("close", (code) =>
      code === 0 ? resolve(Buffer.concat(out)) : reject(new Error(`tar exited ${code}`)),
    );
  });
}

/** A tar of a project written from a map of files (the directory is removed again). */
export async function projectTar(files: Record<string, string>, gzip: boolean): Promise<Buffer> {
  const dir = await writeProject(files);
  try {
    return await tarOf(dir, gzip);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** Docker objects carrying a command's id (what "ran once" is judged by). */
export async function labelledWith(
  docker: DockerClient,
  hostId: string,
  command: string,
): Promise<{ containers: number; networks: number; volumes: number }> {
  const sel = { [Labels.host]: hostId, [Labels.command]: command };
  return {
    containers: (await docker.containers.list(sel)).length,
    networks: (await docker.networks.list(sel)).length,
    volumes: (await docker.volumes.list(sel)).length,
  };
}

/**
 * Removes everything a host id left (for hosts run as a child process): opens a runtime on its
 * state dir, destroys what it holds, collects, unmounts the store and removes the state dir.
 */
export async function wipeHost(hostId: string, stateDir: string): Promise<void> {
  const rt = await Runtime.open({ hostId, stateDir });
  for (const e of await rt.host.records.environments()) await rt.destroy(e.id).catch(() => undefined);
  for (const v of (await rt.host.records.versions()).sort((a, b) => b.number - a.number)) {
    await rt.deleteVersion(v.id).catch(() => undefined);
  }
  await rt.gc();
  await rt.close();
  await run("umount", [join(stateDir, "store", "btrfs")]);
  await rm(stateDir, { recursive: true, force: true });
}
