import { execFile, spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

/**
 * A whole denv on this machine for full-stack tests: `denv up` with a data dir, a port and a
 * config dir of its own (the user's own config is never touched), the real control plane, the
 * real denvd and the real Docker engine. `close()` destroys what the stack's host created and
 * stops both programs.
 */

export const repo = fileURLToPath(new URL("../../../../", import.meta.url));
/** The `denv` command as its package ships it (bin: the bundle, scripts/bundle.mjs). */
export const cli = path.join(repo, "packages/cli/dist/denv.mjs");

export interface RunResult {
  code: number;
  stdout: string;
  stderr: string;
}

export interface Stack {
  url: string;
  token: string;
  dataDir: string;
  env: NodeJS.ProcessEnv;
  hostId(): string;
  denv(args: string[], opts?: { input?: string | Buffer; timeoutMs?: number }): Promise<RunResult>;
  json<T = Record<string, unknown>>(args: string[], opts?: { input?: string | Buffer }): Promise<T>;
  close(): Promise<void>;
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.listen(0, "127.0.0.1", () => {
      const addr = srv.address();
      const port = typeof addr === "object" && addr ? addr.port : 0;
      srv.close(() => resolve(port));
    });
    srv.on("error", reject);
  });
}

export function run(
  file: string,
  args: string[],
  env: NodeJS.ProcessEnv,
  opts: { input?: string | Buffer; timeoutMs?: number } = {},
): Promise<RunResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(file, args, { env, stdio: ["pipe", "pipe", "pipe"] });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    child.stdout.on("data", (b: Buffer) => out.push(b));
    child.stderr.on("data", (b: Buffer) => err.push(b));
    const timer = setTimeout(() => child.kill("SIGKILL"), opts.timeoutMs ?? 300_000);
    child.on("error", reject);
    child.on("close", (code) => {
      clearTimeout(timer);
      resolve({
        code: code ?? 128,
        stdout: Buffer.concat(out).toString(),
        stderr: Buffer.concat(err).toString(),
      });
    });
    child.stdin.on("error", () => undefined);
    child.stdin.end(opts.input);
  });
}

/** `env`: variables for the stack's programs too (e.g. the cp's DENV_CP_* settings). */
export async function startStack(o: { env?: NodeJS.ProcessEnv } = {}): Promise<Stack> {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), "denv-stack-"));
  const port = await freePort();
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    XDG_CONFIG_HOME: path.join(dataDir, "config"),
    DENV_URL: undefined,
    DENV_TOKEN: undefined,
    DENV_PROJECT: undefined,
    // `denv import harbor` runs the denv Python package's importer: the repository's venv
    // (scripts/setup-python installs the package editable from python/).
    DENV_PYTHON: process.env.DENV_PYTHON ?? path.join(repo, "python/.venv/bin/python"),
    ...o.env,
  };
  const denv = (args: string[], opts: { input?: string | Buffer; timeoutMs?: number } = {}) =>
    run("node", [cli, ...args], env, opts);
  const up = await denv(["up", "--data-dir", dataDir, "--listen", `127.0.0.1:${port}`, "--json"], {
    timeoutMs: 120_000,
  });
  if (up.code !== 0) throw new Error(`denv up failed (${up.code}): ${up.stdout}\n${up.stderr}`);
  const url = `http://127.0.0.1:${port}`;
  const token = readFileSync(path.join(dataDir, "admin-token"), "utf8").trim();
  const hostId = () =>
    (JSON.parse(readFileSync(path.join(dataDir, "denvd", "host.json"), "utf8")) as { host_id: string })
      .host_id;
  return {
    url,
    token,
    dataDir,
    env,
    hostId,
    denv,
    async json<T>(args: string[], opts: { input?: string | Buffer } = {}): Promise<T> {
      const r = await denv([...args, "--json"], opts);
      const lines = r.stdout.trim().split("\n");
      if (lines.length !== 1)
        throw new Error(`expected one JSON line from denv ${args.join(" ")}, got:\n${r.stdout}\n${r.stderr}`);
      return JSON.parse(lines[0] as string) as T;
    },
    async close() {
      let host: string | undefined;
      try {
        host = hostId();
      } catch {
        host = undefined;
      }
      // Environments first, through the API (so the cp's records agree), then the programs.
      const envs = await denv(["env", "list", "--json"]);
      if (envs.code === 0) {
        const list = (JSON.parse(envs.stdout) as { environments?: Array<{ id: string }> }).environments ?? [];
        for (const e of list) await denv(["env", "destroy", e.id]);
      }
      await denv(["down", "--data-dir", dataDir]);
      if (host) await removeHostLeftovers(host, path.join(dataDir, "denvd"));
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

/** Whatever a stack's host left in Docker, iptables and its store (a crash test may leave some). */
export async function removeHostLeftovers(hostId: string, stateDir: string): Promise<void> {
  const sh = promisify(execFile);
  const label = `label=ai.denv.host=${hostId}`;
  const ids = async (args: string[]) =>
    (await sh("docker", args).catch(() => ({ stdout: "" }))).stdout.split("\n").filter(Boolean);
  for (const c of await ids(["ps", "-aq", "--filter", label]))
    await sh("docker", ["rm", "-f", c]).catch(() => undefined);
  for (const n of await ids(["network", "ls", "-q", "--filter", label])) {
    await sh("docker", ["network", "rm", n]).catch(() => undefined);
  }
  for (const v of await ids(["volume", "ls", "-q", "--filter", label]))
    await sh("docker", ["volume", "rm", "-f", v]).catch(() => undefined);
  for (const i of await ids(["images", "-q", "--filter", label]))
    await sh("docker", ["rmi", "-f", i]).catch(() => undefined);
  // Firewall rules of networks that are gone carry a `denv:<id>` comment.
  const rules = (await sh("iptables", ["-w", "-S", "INPUT"]).catch(() => ({ stdout: "" }))).stdout.split(
    "\n",
  );
  const live = new Set(await ids(["network", "ls", "-q", "--no-trunc"]));
  for (const rule of rules) {
    const m = /--comment "?denv:([0-9a-f]{12})"?/.exec(rule);
    if (m && ![...live].some((id) => id.startsWith(m[1] as string))) {
      await sh("iptables", [
        "-w",
        ...rule
          .replace(/^-A /, "-D ")
          .split(" ")
          .map((a) => a.replace(/^"|"$/g, "")),
      ]).catch(() => undefined);
    }
  }
  const mnt = path.join(stateDir, "store", "btrfs");
  if (existsSync(mnt)) await sh("umount", [mnt]).catch(() => undefined);
}

/** The tools image (deploy/tools-image: Harbor, TRL, verifiers, compose v2), shared by the framework tests. */
export const TOOLS_IMAGE = "denv-tools:trixie";

/** Builds the tools image when missing (or when python/ changed); returns at once otherwise. */
export async function ensureToolsImage(): Promise<void> {
  const built = await run(path.join(repo, "deploy/tools-image"), ["--tag", TOOLS_IMAGE], process.env, {
    timeoutMs: 1_500_000,
  });
  if (built.code !== 0) throw new Error(`deploy/tools-image failed: ${built.stdout}\n${built.stderr}`);
}

/**
 * The images named `match` that a framework's own runs add (they carry no denv label): taken
 * now, `remove()` deletes the ones that were not there then.
 */
export async function imagesAdded(match: (name: string) => boolean): Promise<{ remove(): Promise<void> }> {
  const names = async () =>
    (await run("docker", ["images", "--format", "{{.Repository}}:{{.Tag}}"], process.env)).stdout
      .split("\n")
      .filter((n) => n !== "" && match(n));
  const before = new Set(await names());
  return {
    async remove() {
      for (const image of await names()) {
        if (!before.has(image)) await run("docker", ["rmi", "-f", image], process.env);
      }
    },
  };
}
