import { execFileSync, spawn } from "node:child_process";
import { chownSync, existsSync, readdirSync, realpathSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";

/**
 * A throwaway PostgreSQL server for tests: initdb into a temp directory, pg_ctl start on
 * 127.0.0.1 and a free port (trust auth, loopback only), stop and remove it at the end. Uses
 * Debian's binaries (installing the `postgresql` package when they are missing) and, as root,
 * runs them as a non-root user because initdb refuses root.
 */

export interface PostgresServer {
  /** Over TCP on 127.0.0.1. */
  url: string;
  /** The same server over its Unix socket (no loopback TCP stack on either side of a query). */
  socketUrl: string;
  stop(): Promise<void>;
}

const RUN_AS = "postgres";

function findBinDir(): string | undefined {
  for (const bin of ["/usr/local/bin/initdb", "/usr/bin/initdb"]) {
    if (existsSync(bin)) {
      const dir = dirname(realpathSync(bin));
      if (existsSync(join(dir, "pg_ctl"))) return dir;
    }
  }
  const root = "/usr/lib/postgresql";
  if (!existsSync(root)) return undefined;
  const versions = readdirSync(root)
    .filter((v) => existsSync(join(root, v, "bin", "initdb")))
    .sort((a, b) => Number(b) - Number(a));
  return versions[0] ? join(root, versions[0], "bin") : undefined;
}

/** The binaries' directory, installing Debian's postgresql package if needed (root only). */
export function ensurePostgresBinaries(): string {
  const found = findBinDir();
  if (found) return found;
  if (process.getuid?.() !== 0) {
    throw new Error(
      "PostgreSQL binaries are missing and installing them needs root: apt-get install -y postgresql",
    );
  }
  const env = { ...process.env, DEBIAN_FRONTEND: "noninteractive" };
  try {
    execFileSync("apt-get", ["install", "-y", "--no-install-recommends", "postgresql"], {
      stdio: "ignore",
      env,
    });
  } catch {
    execFileSync("apt-get", ["update"], { stdio: "ignore", env });
    execFileSync("apt-get", ["install", "-y", "--no-install-recommends", "postgresql"], {
      stdio: "ignore",
      env,
    });
  }
  const dir = findBinDir();
  if (!dir) throw new Error("installed postgresql, but found no initdb under /usr/lib/postgresql/*/bin");
  return dir;
}

/** uid/gid to run the server as when we are root (creating the user if it is missing). */
function runAs(): { uid: number; gid: number } | undefined {
  if (process.getuid?.() !== 0) return undefined;
  const id = (flag: string) => Number(execFileSync("id", [flag, RUN_AS], { encoding: "utf8" }).trim());
  try {
    return { uid: id("-u"), gid: id("-g") };
  } catch {
    execFileSync("useradd", ["--system", "--no-create-home", "--shell", "/usr/sbin/nologin", RUN_AS]);
    return { uid: id("-u"), gid: id("-g") };
  }
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const addr = srv.address();
      srv.close(() => resolve(typeof addr === "object" && addr ? addr.port : 0));
    });
  });
}

function run(cmd: string, args: string[], user: { uid: number; gid: number } | undefined): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { stdio: ["ignore", "ignore", "pipe"], ...(user ?? {}) });
    let stderr = "";
    child.stderr.on("data", (d: Buffer) => {
      stderr += d.toString();
    });
    child.on("error", reject);
    child.on("close", (code) =>
      code === 0
        ? resolve()
        : reject(new Error(`${cmd} ${args[0] ?? ""} failed (${code}): ${stderr.trim()}`)),
    );
  });
}

export async function startPostgres(): Promise<PostgresServer> {
  const bin = ensurePostgresBinaries();
  const user = runAs();
  const dir = await mkdtemp(join(tmpdir(), "denv-pg-"));
  if (user) chownSync(dir, user.uid, user.gid);
  const data = join(dir, "data");
  await run(
    join(bin, "initdb"),
    ["-D", data, "-U", "denv", "--auth=trust", "-E", "UTF8", "--no-instructions"],
    user,
  );
  const port = await freePort();
  await run(
    join(bin, "pg_ctl"),
    ["-D", data, "-l", join(dir, "server.log"), "-w", "-o", `-p ${port} -h 127.0.0.1 -k ${dir}`, "start"],
    user,
  );
  return {
    url: `postgres://denv@127.0.0.1:${port}/postgres`,
    socketUrl: `postgres://denv@/postgres?host=${encodeURIComponent(dir)}&port=${port}`,
    stop: async () => {
      await run(join(bin, "pg_ctl"), ["-D", data, "-m", "fast", "-w", "stop"], user).catch(() => undefined);
      await rm(dir, { recursive: true, force: true });
    },
  };
}
