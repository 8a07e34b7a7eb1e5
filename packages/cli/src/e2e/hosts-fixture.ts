import { type ChildProcess, execFile, spawn } from "node:child_process";
import { randomBytes, randomInt } from "node:crypto";
import {
  closeSync,
  copyFileSync,
  existsSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  rmdirSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import http from "node:http";
import net from "node:net";
import path from "node:path";
import { promisify } from "node:util";
import { DenvClient } from "@denv/sdk";
import { cli, type RunResult, repo, run } from "./stack.js";

/**
 * Many hosts on one machine, for multi-host end-to-end tests: one control plane and N denvd, each
 * denvd with a Docker engine of its own in a network namespace of its own, all made here and all
 * removed by close(). The engines share the machine's mount namespace (nsenter --net only), so
 * the btrfs store a denvd mounts is visible to its dockerd, and the kernel, but nothing else of
 * the machine's engine: another socket, data root, exec root and containerd.
 *
 * Layout of fixture `<id>` (4 hex digits):
 *   bridge `dvt<id>`, 10.252.<k>.1/24       the control plane listens here
 *   netns `dvt<id>-<name>`, eth0 10.252.<k>.<10+i>/24 (a veth `dvt<id>v<i>` on the bridge)
 *   /run/dvt/<id>/owner                      pid and start time of the process that owns it
 *   /run/dvt/<id>/<name>/docker.sock         the host's engine (exec root x/, pid file)
 *   /var/lib/dvt/<id>/<name>/{docker,denvd}  the engine's data root, denvd's state dir
 *   /var/lib/dvt/<id>/cp                     the control plane's data and admin token
 * No route leaves a namespace (no default route, no NAT): a host reaches the bridge, and the other
 * hosts on it, and nothing else. The machine's engine sets FORWARD's policy to DROP and bridged
 * frames pass through it (br_netfilter), so one rule, `FORWARD -i dvt<id> -o dvt<id> ACCEPT`
 * (commented `dvt<id>`), lets the hosts talk to each other (direct version transfers).
 * sweepStaleHosts() removes what an earlier run that died left behind.
 */

const RUN_ROOT = "/run/dvt";
const LIB_ROOT = "/var/lib/dvt";
/** Every name this fixture gives a link, a namespace or a folder starts with it, then the 4-hex id. */
const PREFIX = "dvt";
const ID = /^[0-9a-f]{4}$/;
const BASE_IMAGE = "debian:bookworm-slim";
const CP_BIN = path.join(repo, "packages/cp/dist/main.js");
const DENVD_BIN = path.join(repo, "packages/denvd/dist/main.js");

const sh = promisify(execFile);

/**
 * DENV_E2E_DEBUG_DIR=DIR (a debugging aid, for profiling a benchmark): the cp and every
 * `denvd run` start under `node --cpu-prof`, each writing its profile into DIR/<cp|name>/ when it
 * exits, and close() copies their logs into DIR before it removes them.
 */
function debugFlags(proc: string): string[] {
  const dir = process.env.DENV_E2E_DEBUG_DIR;
  return dir ? ["--cpu-prof", `--cpu-prof-dir=${path.join(path.resolve(dir), proc)}`] : [];
}

function keepLog(log: string, as: string): void {
  const dir = process.env.DENV_E2E_DEBUG_DIR;
  if (!dir || !existsSync(log)) return;
  mkdirSync(dir, { recursive: true });
  copyFileSync(log, path.join(dir, as));
}

export interface HostSpec<N extends string = string> {
  /** [a-z0-9]{1,8}: names the namespace, the folders and the host id (dvt<id>-<name>). */
  name: N;
  /** Placement labels, given at join (the operator's) and announced by denvd run. */
  labels?: Record<string, string>;
  /** More `denvd run` flags, e.g. ["--capacity-memory", "536870912"]. */
  denvdArgs?: string[];
}

export interface HostsOptions<N extends string> {
  hosts: ReadonlyArray<HostSpec<N>>;
  /** More control plane flags, e.g. ["--placement-overcommit-memory", "1"]. */
  cpArgs?: string[];
}

export interface FixtureHost {
  name: string;
  /** The host id at the control plane (and in every ai.denv.host label of its engine). */
  id: string;
  netns: string;
  /** eth0's address inside the namespace. */
  address: string;
  /** The host's own Docker engine: unix socket path. */
  socket: string;
  stateDir: string;
  /** denvd's log (appended to across restarts). */
  log: string;
  /** `docker -H unix://<socket> ARGS` against this host's engine. */
  docker(args: string[], opts?: { input?: string | Buffer; timeoutMs?: number }): Promise<RunResult>;
  /** The running denvd's pid, or undefined when it is not running. */
  pid(): number | undefined;
  /** SIGTERM to denvd, and wait until it exited (SIGKILL after 15 s). */
  stop(): Promise<void>;
  /** `signal` (default SIGKILL) to denvd, and wait until it exited. */
  kill(signal?: NodeJS.Signals): Promise<void>;
  /** Starts denvd again (same flags) and waits until the control plane has its fresh hello. */
  start(): Promise<void>;
}

export interface Hosts<N extends string = string> extends AsyncDisposable {
  /** The fixture's 4-hex id (in every name it made). */
  id: string;
  url: string;
  /** The admin token. */
  token: string;
  /** What the CLI runs with: DENV_URL, DENV_TOKEN and a private HOME and XDG_CONFIG_HOME. */
  env: NodeJS.ProcessEnv;
  client: DenvClient;
  hosts: Record<N, FixtureHost>;
  /** How long startHosts took, in ms, and its stages (sweep, engines and cp, join, online). */
  startMs: number;
  startStages: Record<"sweep" | "engines" | "join" | "online", number>;
  /** The built CLI with `env`. */
  denv(args: string[], opts?: { input?: string | Buffer; timeoutMs?: number }): Promise<RunResult>;
  /** The built CLI with `--json`: its one line of stdout, parsed (whatever the exit code). */
  json<T = Record<string, unknown>>(args: string[], opts?: { input?: string | Buffer }): Promise<T>;
  /** The control plane's log. */
  cpLog: string;
  /** Destroys environments through the API, stops every process, removes everything; resolves with the ms it took. */
  close(): Promise<number>;
}

/** A program this fixture started, with its exit as a promise. */
interface Proc {
  child: ChildProcess;
  exited: Promise<void>;
}

function startProc(file: string, args: string[], log: string, env: NodeJS.ProcessEnv): Proc {
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

const running = (p: Proc | undefined): p is Proc =>
  p !== undefined && p.child.exitCode === null && p.child.signalCode === null;

/** `signal`, then SIGKILL when it has not exited after `graceMs`. */
async function stopProc(p: Proc | undefined, signal: NodeJS.Signals, graceMs: number): Promise<void> {
  if (!running(p)) return;
  p.child.kill(signal);
  const timer = new Promise<"late">((r) => setTimeout(() => r("late"), graceMs).unref());
  if ((await Promise.race([p.exited, timer])) === "late") {
    p.child.kill("SIGKILL");
    await p.exited;
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function tail(file: string, lines = 30): string {
  try {
    return readFileSync(file, "utf8").trimEnd().split("\n").slice(-lines).join("\n");
  } catch {
    return "(no log)";
  }
}

/** Polls until `ready` is true; fails with `log`'s end when `proc` exits first or time runs out. */
async function waitUntil(
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
function pingEngine(socket: string): Promise<boolean> {
  return new Promise((resolve) => {
    const req = http.get({ socketPath: socket, path: "/_ping", timeout: 2_000 }, (res) => {
      res.resume();
      resolve(res.statusCode === 200);
    });
    req.on("error", () => resolve(false));
    req.on("timeout", () => req.destroy());
  });
}

function freePort(host: string): Promise<number> {
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

/** The process's start time in clock ticks since boot (field 22 of /proc/PID/stat): a pid with another start time is another process. */
function startTime(pid: number): string | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return fields[0] === "Z" ? undefined : fields[19];
  } catch {
    return undefined;
  }
}

/** Whether the process that wrote fixture `id`'s owner file still runs. */
function ownerAlive(id: string): boolean {
  try {
    const [pid, start] = readFileSync(path.join(RUN_ROOT, id, "owner"), "utf8")
      .trim()
      .split(" ");
    return start !== undefined && startTime(Number(pid)) === start;
  } catch {
    return false;
  }
}

/** pids whose command line names a folder of fixture `id`, with all their descendants (containers under a shim). */
function processesOf(id: string): number[] {
  const marks = [`${RUN_ROOT}/${id}/`, `${LIB_ROOT}/${id}/`];
  const children = new Map<number, number[]>();
  const roots: number[] = [];
  for (const entry of readdirSync("/proc")) {
    const pid = Number(entry);
    if (!Number.isInteger(pid) || pid === process.pid) continue;
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
      const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
      children.set(ppid, [...(children.get(ppid) ?? []), pid]);
      const cmdline = readFileSync(`/proc/${pid}/cmdline`, "utf8").replaceAll("\0", " ");
      if (marks.some((m) => cmdline.includes(m))) roots.push(pid);
    } catch {
      // gone meanwhile
    }
  }
  const out = new Set<number>();
  const visit = (pid: number) => {
    if (out.has(pid)) return;
    out.add(pid);
    for (const c of children.get(pid) ?? []) visit(c);
  };
  for (const r of roots) visit(r);
  return [...out];
}

/** Mount points at or below fixture `id`'s folders, deepest first. */
function mountsOf(id: string): string[] {
  const roots = [path.join(RUN_ROOT, id), path.join(LIB_ROOT, id)];
  const points = readFileSync("/proc/mounts", "utf8")
    .split("\n")
    .map((l) =>
      (l.split(" ")[1] ?? "").replace(/\\([0-7]{3})/g, (_, o: string) =>
        String.fromCharCode(Number.parseInt(o, 8)),
      ),
    )
    .filter((mp) => roots.some((r) => mp === r || mp.startsWith(`${r}/`)));
  return [...new Set(points)].sort(
    (a, b) => b.split("/").length - a.split("/").length || b.length - a.length,
  );
}

async function netnsNames(): Promise<string[]> {
  const out = (await sh("ip", ["netns", "list"])).stdout;
  return out
    .split("\n")
    .map((l) => l.split(" ")[0] ?? "")
    .filter(Boolean);
}

async function linkNames(): Promise<string[]> {
  const out = (await sh("ip", ["-o", "link", "show"])).stdout;
  return out
    .split("\n")
    .map((l) => (l.split(": ")[1] ?? "").split("@")[0] ?? "")
    .filter(Boolean);
}

/** FORWARD's rule (without -I/-D) that lets the hosts on fixture `id`'s bridge reach each other. */
function forwardRule(id: string): string[] {
  const bridge = `${PREFIX}${id}`;
  return ["FORWARD", "-i", bridge, "-o", bridge, "-m", "comment", "--comment", bridge, "-j", "ACCEPT"];
}

/**
 * Removes all of fixture `id`: its processes (SIGKILL, with their descendants), mounts (lazily,
 * deepest first), loop devices, namespaces, links and folders. Every step runs; their failures
 * come back together.
 */
async function teardown(id: string): Promise<string[]> {
  const errors: string[] = [];
  const step = async (what: string, fn: () => Promise<void>) => {
    try {
      await fn();
    } catch (err) {
      errors.push(`${what}: ${(err as Error).message}`);
    }
  };
  await step("kill processes", async () => {
    for (let round = 0; round < 3; round++) {
      const pids = processesOf(id);
      if (pids.length === 0) return;
      for (const pid of pids) {
        try {
          process.kill(pid, "SIGKILL");
        } catch {
          // gone
        }
      }
      for (let i = 0; i < 50 && pids.some((p) => startTime(p) !== undefined); i++) await sleep(100);
    }
    const left = processesOf(id);
    if (left.length > 0) throw new Error(`still running: ${left.join(", ")}`);
  });
  await step("unmount", async () => {
    for (let round = 0; round < 5; round++) {
      const points = mountsOf(id);
      if (points.length === 0) return;
      for (const mp of points) await sh("umount", ["-l", mp]).catch(() => undefined);
    }
    const left = mountsOf(id);
    if (left.length > 0) throw new Error(`still mounted: ${left.join(", ")}`);
  });
  await step("detach loop devices", async () => {
    const out = (await sh("losetup", ["-l", "-n", "-O", "NAME,BACK-FILE"]).catch(() => ({ stdout: "" })))
      .stdout;
    for (const line of out.split("\n")) {
      const [dev, file] = line.trim().split(/\s+/, 2);
      if (dev && file?.startsWith(`${LIB_ROOT}/${id}/`)) await sh("losetup", ["-d", dev]);
    }
  });
  await step("delete the forwarding rule", async () => {
    const rule = forwardRule(id);
    for (let i = 0; i < 10; i++) {
      const r = await sh("iptables", ["-w", "-C", ...rule]).then(
        () => true,
        () => false,
      );
      if (!r) return;
      await sh("iptables", ["-w", "-D", ...rule]);
    }
  });
  await step("delete namespaces", async () => {
    for (const ns of await netnsNames())
      if (ns.startsWith(`${PREFIX}${id}-`)) await sh("ip", ["netns", "del", ns]);
  });
  await step("delete links", async () => {
    for (const link of await linkNames()) {
      if (link === `${PREFIX}${id}` || new RegExp(`^${PREFIX}${id}[vp]\\d+$`).test(link))
        await sh("ip", ["link", "del", link]).catch((err: Error) => {
          // A veth goes with its namespace's end: gone meanwhile is fine.
          if (existsSync(`/sys/class/net/${link}`)) throw err;
        });
    }
  });
  await step("remove folders", async () => {
    rmSync(path.join(RUN_ROOT, id), { recursive: true, force: true });
    rmSync(path.join(LIB_ROOT, id), { recursive: true, force: true });
    for (const root of [RUN_ROOT, LIB_ROOT]) {
      try {
        rmdirSync(root);
      } catch {
        // another fixture's, or already gone
      }
    }
  });
  return errors;
}

/**
 * What earlier runs left behind: every fixture id found in /run/dvt, /var/lib/dvt, `dvt<id>-*`
 * namespaces, `dvt<id>` links or a process's command line, whose owner process is gone. Only
 * names of this fixture's shape are touched: never the machine's engine, never another netns.
 */
export async function sweepStaleHosts(): Promise<string[]> {
  const ids = new Set<string>();
  for (const root of [RUN_ROOT, LIB_ROOT]) {
    if (!existsSync(root)) continue;
    for (const d of readdirSync(root)) if (ID.test(d)) ids.add(d);
  }
  for (const ns of await netnsNames()) {
    const m = new RegExp(`^${PREFIX}([0-9a-f]{4})-`).exec(ns);
    if (m?.[1]) ids.add(m[1]);
  }
  for (const link of await linkNames()) {
    const m = new RegExp(`^${PREFIX}([0-9a-f]{4})([vp]\\d+)?$`).exec(link);
    if (m?.[1]) ids.add(m[1]);
  }
  const forward = (await sh("iptables", ["-w", "-S", "FORWARD"]).catch(() => ({ stdout: "" }))).stdout;
  for (const m of forward.matchAll(new RegExp(`--comment ${PREFIX}([0-9a-f]{4})\\b`, "g")))
    if (m[1]) ids.add(m[1]);
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const cmdline = readFileSync(`/proc/${entry}/cmdline`, "utf8");
      for (const m of cmdline.matchAll(/\/(?:run|var\/lib)\/dvt\/([0-9a-f]{4})\//g)) if (m[1]) ids.add(m[1]);
    } catch {
      // gone meanwhile
    }
  }
  const swept: string[] = [];
  const errors: string[] = [];
  for (const id of ids) {
    if (ownerAlive(id)) continue;
    errors.push(...(await teardown(id)).map((e) => `${id}: ${e}`));
    swept.push(id);
  }
  if (errors.length > 0) throw new Error(`sweeping stale hosts failed:\n${errors.join("\n")}`);
  return swept;
}

/** A /24 in 10.252.0.0/16 no address or route of this machine uses yet. */
async function freeSubnet(): Promise<number> {
  for (let attempt = 0; attempt < 50; attempt++) {
    const k = randomInt(1, 251);
    const used = `${(await sh("ip", ["-4", "-o", "addr", "show"])).stdout}\n${(await sh("ip", ["-4", "route", "show", "table", "all"])).stdout}`;
    if (!used.includes(`10.252.${k}.`)) return k;
  }
  throw new Error("no free /24 in 10.252.0.0/16");
}

/** Environment variables of this process, without any that would point denv or docker elsewhere. */
function cleanEnv(): NodeJS.ProcessEnv {
  return Object.fromEntries(
    Object.entries(process.env).filter(([k]) => !/^(DENV_|DENVD_|DOCKER_)/.test(k)),
  ) as NodeJS.ProcessEnv;
}

/**
 * Starts the fixture: sweeps stale runs, makes the bridge, starts the control plane and each
 * host's namespace + engine (in parallel, each loaded with debian:bookworm-slim from the
 * machine's engine), joins and starts each denvd, and waits until the control plane lists every
 * host online. On failure it removes what it made and throws.
 */
export async function startHosts<const N extends string>(opts: HostsOptions<N>): Promise<Hosts<N>> {
  const started = Date.now();
  for (const h of opts.hosts) {
    if (!/^[a-z0-9]{1,8}$/.test(h.name)) throw new Error(`host name '${h.name}' is not [a-z0-9]{1,8}`);
  }
  if (new Set(opts.hosts.map((h) => h.name)).size !== opts.hosts.length) throw new Error("host names repeat");
  for (const bin of [CP_BIN, DENVD_BIN, cli]) {
    if (!existsSync(bin)) throw new Error(`${bin} does not exist: npm run build`);
  }
  await sweepStaleHosts();
  const stages = { sweep: Date.now() - started, engines: 0, join: 0, online: 0 };
  let mark = Date.now();
  const stage = (name: "engines" | "join" | "online") => {
    stages[name] = Date.now() - mark;
    mark = Date.now();
  };

  let id = randomBytes(2).toString("hex");
  while (existsSync(path.join(RUN_ROOT, id)) || existsSync(path.join(LIB_ROOT, id)))
    id = randomBytes(2).toString("hex");
  const runDir = path.join(RUN_ROOT, id);
  const libDir = path.join(LIB_ROOT, id);
  // The owner first: a sweep by a concurrent run leaves everything below alone from now on.
  mkdirSync(runDir, { recursive: true, mode: 0o700 });
  writeFileSync(path.join(runDir, "owner"), `${process.pid} ${startTime(process.pid)}\n`);
  mkdirSync(libDir, { recursive: true, mode: 0o700 });

  const procs: { cp?: Proc; dockerd: Map<string, Proc>; denvd: Map<string, Proc> } = {
    dockerd: new Map(),
    denvd: new Map(),
  };
  const bridge = `${PREFIX}${id}`;
  const abandon = async (err: unknown): Promise<never> => {
    for (const p of procs.denvd.values()) await stopProc(p, "SIGKILL", 0);
    await stopProc(procs.cp, "SIGKILL", 0);
    await Promise.all([...procs.dockerd.values()].map((p) => stopProc(p, "SIGTERM", 20_000)));
    const errors = await teardown(id);
    throw new Error(
      `${(err as Error).message}${errors.length > 0 ? `\n(and removing the fixture: ${errors.join("; ")})` : ""}`,
      { cause: err },
    );
  };

  try {
    const k = await freeSubnet();
    const gateway = `10.252.${k}.1`;
    await sh("ip", ["link", "add", bridge, "type", "bridge"]);
    await sh("ip", ["addr", "add", `${gateway}/24`, "dev", bridge]);
    await sh("ip", ["link", "set", bridge, "up"]);
    await sh("iptables", ["-w", "-I", ...forwardRule(id)]);

    // The control plane, on the bridge address (hosts reach it there; the CLI too).
    const port = await freePort(gateway);
    const url = `http://${gateway}:${port}`;
    const cpDir = path.join(libDir, "cp");
    mkdirSync(cpDir, { mode: 0o700 });
    const cpLog = path.join(libDir, "cp.log");
    const adminTokenFile = path.join(cpDir, "admin-token");
    procs.cp = startProc(
      process.execPath,
      [
        ...debugFlags("cp"),
        CP_BIN,
        "--listen",
        `${gateway}:${port}`,
        "--public-url",
        url,
        "--data-dir",
        cpDir,
        "--admin-token-file",
        adminTokenFile,
        ...(opts.cpArgs ?? []),
      ],
      cpLog,
      cleanEnv(),
    );
    const anonymous = new DenvClient({ url });
    const cpReady = waitUntil(
      `the control plane at ${url}`,
      30_000,
      async () => {
        await anonymous.health();
        return existsSync(adminTokenFile);
      },
      { p: procs.cp, log: cpLog },
    );

    // The base image once out of the machine's engine (read only), into each engine below.
    const baseTar = path.join(libDir, "base.tar");
    const saved = sh("docker", ["save", "-o", baseTar, BASE_IMAGE], { env: cleanEnv() });

    const hosts = opts.hosts.map((spec, i) => {
      const hostRun = path.join(runDir, spec.name);
      const hostLib = path.join(libDir, spec.name);
      return {
        spec,
        id: `${PREFIX}${id}-${spec.name}`,
        netns: `${PREFIX}${id}-${spec.name}`,
        veth: `${PREFIX}${id}v${i}`,
        address: `10.252.${k}.${10 + i}`,
        run: hostRun,
        lib: hostLib,
        socket: path.join(hostRun, "docker.sock"),
        stateDir: path.join(hostLib, "denvd"),
        dockerLog: path.join(hostLib, "dockerd.log"),
        log: path.join(hostLib, "denvd.log"),
      };
    });

    const engines = hosts.map(async (h, i) => {
      mkdirSync(h.run, { recursive: true, mode: 0o700 });
      mkdirSync(h.stateDir, { recursive: true, mode: 0o700 });
      const ns = (...args: string[]) => sh("ip", ["-n", h.netns, ...args]);
      await sh("ip", ["netns", "add", h.netns]);
      await sh("ip", ["link", "add", h.veth, "type", "veth", "peer", "name", `${PREFIX}${id}p${i}`]);
      await sh("ip", ["link", "set", h.veth, "master", bridge, "up"]);
      await sh("ip", ["link", "set", `${PREFIX}${id}p${i}`, "netns", h.netns]);
      await ns("link", "set", `${PREFIX}${id}p${i}`, "name", "eth0");
      await ns("addr", "add", `${h.address}/24`, "dev", "eth0");
      await ns("link", "set", "eth0", "up");
      await ns("link", "set", "lo", "up");
      // nsenter --net, not `ip netns exec`: that one also makes a private mount namespace, and
      // dockerd must see the btrfs store denvd mounts.
      const p = startProc(
        "nsenter",
        [
          `--net=/run/netns/${h.netns}`,
          "dockerd",
          "--data-root",
          path.join(h.lib, "docker"),
          "--exec-root",
          path.join(h.run, "x"),
          "-H",
          `unix://${h.socket}`,
          "--pidfile",
          path.join(h.run, "docker.pid"),
          // Where dockerd would use the machine's containerd (its socket exists), a namespace of
          // its own keeps this engine's containers apart from the machine engine's.
          "--containerd-namespace",
          h.netns,
          "--containerd-plugins-namespace",
          `${h.netns}-p`,
        ],
        h.dockerLog,
        cleanEnv(),
      );
      procs.dockerd.set(h.spec.name, p);
      await waitUntil(`the engine at ${h.socket}`, 60_000, () => pingEngine(h.socket), {
        p,
        log: h.dockerLog,
      });
      await saved;
      await sh("docker", ["-H", `unix://${h.socket}`, "load", "-i", baseTar], { env: cleanEnv() });
    });
    // allSettled: a failure is thrown only once every engine is settled, so none starts after the teardown.
    const settled = await Promise.allSettled([cpReady, saved, ...engines]);
    const failed = settled.find((s): s is PromiseRejectedResult => s.status === "rejected");
    if (failed) throw failed.reason;
    rmSync(baseTar, { force: true });
    stage("engines");

    const token = readFileSync(adminTokenFile, "utf8").trim();
    const client = new DenvClient({ url, token });
    const join = await client.createJoinToken("local", { uses: hosts.length, ttl_sec: 600 });
    if (join.token === undefined)
      throw new Error("the control plane returned a join token without its secret");
    const labelArgs = (labels: Record<string, string> = {}) =>
      Object.entries(labels).flatMap(([key, v]) => ["--label", `${key}=${v}`]);
    const inNetns = (netns: string, args: string[], nodeFlags: string[] = []) => [
      `--net=/run/netns/${netns}`,
      process.execPath,
      ...nodeFlags,
      DENVD_BIN,
      ...args,
    ];
    await Promise.all(
      hosts.map(async (h) => {
        const r = await run(
          "nsenter",
          inNetns(h.netns, [
            "join",
            "--url",
            url,
            "--token",
            join.token as string,
            "--name",
            h.id,
            ...labelArgs(h.spec.labels),
            "--state-dir",
            h.stateDir,
            // Plain http:// to the bridge address: a network this fixture made, on this machine.
            "--insecure",
            "--json",
          ]),
          cleanEnv(),
          { timeoutMs: 60_000 },
        );
        if (r.code !== 0) throw new Error(`denvd join of ${h.id} exited ${r.code}: ${r.stdout}${r.stderr}`);
        const joined = JSON.parse(r.stdout) as { host_id: string };
        if (joined.host_id !== h.id)
          throw new Error(`${h.spec.name} joined as ${joined.host_id}, not ${h.id}`);
      }),
    );

    /** Waits until the control plane has a hello of `host` from after `since`. */
    const waitOnline = (h: (typeof hosts)[number], since: number) =>
      waitUntil(
        `host ${h.id} online`,
        90_000,
        async () =>
          (await client.listHosts()).some(
            (x) =>
              x.id === h.id &&
              x.status === "online" &&
              x.last_seen_at !== undefined &&
              Date.parse(x.last_seen_at) >= since,
          ),
        { p: procs.denvd.get(h.spec.name), log: h.log },
      );
    const startDenvd = async (h: (typeof hosts)[number]) => {
      if (running(procs.denvd.get(h.spec.name))) throw new Error(`denvd of ${h.id} is running already`);
      // A denvd just killed may still count as online until the control plane sees its socket
      // close: online afterwards then means a fresh hello.
      await waitUntil(`host ${h.id} offline`, 30_000, async () =>
        (await client.listHosts()).every((x) => x.id !== h.id || x.status !== "online"),
      );
      // The control plane's clock stamps last_seen_at; allow it to lag this one's a little.
      const since = Date.now() - 2_000;
      procs.denvd.set(
        h.spec.name,
        startProc(
          "nsenter",
          inNetns(
            h.netns,
            [
              "run",
              "--state-dir",
              h.stateDir,
              "--docker-socket",
              h.socket,
              ...labelArgs(h.spec.labels),
              "--insecure",
              ...(h.spec.denvdArgs ?? []),
            ],
            debugFlags(h.spec.name),
          ),
          h.log,
          cleanEnv(),
        ),
      );
      await waitOnline(h, since);
    };
    stage("join");
    await Promise.all(hosts.map(startDenvd));
    stage("online");

    const home = path.join(libDir, "home");
    mkdirSync(home, { mode: 0o700 });
    const env: NodeJS.ProcessEnv = {
      ...cleanEnv(),
      HOME: home,
      XDG_CONFIG_HOME: path.join(home, ".config"),
      DENV_URL: url,
      DENV_TOKEN: token,
    };
    const denv = (args: string[], o: { input?: string | Buffer; timeoutMs?: number } = {}) =>
      run(process.execPath, [cli, ...args], env, o);

    const byName = {} as Record<N, FixtureHost>;
    for (const h of hosts) {
      byName[h.spec.name] = {
        name: h.spec.name,
        id: h.id,
        netns: h.netns,
        address: h.address,
        socket: h.socket,
        stateDir: h.stateDir,
        log: h.log,
        docker: (args, o = {}) => run("docker", ["-H", `unix://${h.socket}`, ...args], cleanEnv(), o),
        pid: () => {
          const p = procs.denvd.get(h.spec.name);
          return running(p) ? p.child.pid : undefined;
        },
        stop: () => stopProc(procs.denvd.get(h.spec.name), "SIGTERM", 15_000),
        kill: (signal = "SIGKILL") => stopProc(procs.denvd.get(h.spec.name), signal, 15_000),
        start: () => startDenvd(h),
      };
    }

    let closed: Promise<number> | undefined;
    const closeOnce = (): Promise<number> => {
      closed ??= close();
      return closed;
    };
    const close = async (): Promise<number> => {
      const t0 = Date.now();
      const errors: string[] = [];
      try {
        await destroyEnvironments(client);
      } catch (err) {
        errors.push(`destroying environments: ${(err as Error).message}`);
      }
      await Promise.all([...procs.denvd.values()].map((p) => stopProc(p, "SIGTERM", 15_000)));
      await stopProc(procs.cp, "SIGTERM", 10_000);
      keepLog(cpLog, "cp.log");
      for (const h of hosts) keepLog(h.log, `denvd-${h.spec.name}.log`);
      // dockerd stops its containers and unmounts its data root when it is let to.
      await Promise.all([...procs.dockerd.values()].map((p) => stopProc(p, "SIGTERM", 30_000)));
      errors.push(...(await teardown(id)));
      if (errors.length > 0) throw new Error(`closing hosts fixture ${id} failed:\n${errors.join("\n")}`);
      return Date.now() - t0;
    };
    return {
      id,
      url,
      token,
      env,
      client,
      hosts: byName,
      startMs: Date.now() - started,
      startStages: stages,
      cpLog,
      denv,
      async json<T>(args: string[], o: { input?: string | Buffer } = {}): Promise<T> {
        const r = await denv([...args, "--json"], o);
        const lines = r.stdout.trim().split("\n");
        if (lines.length !== 1 || lines[0] === "")
          throw new Error(
            `expected one JSON line from denv ${args.join(" ")} (exit ${r.code}), got:\n${r.stdout}\n${r.stderr}`,
          );
        return JSON.parse(lines[0] as string) as T;
      },
      close: closeOnce,
      async [Symbol.asyncDispose]() {
        await closeOnce();
      },
    };
  } catch (err) {
    return abandon(err);
  }
}

/**
 * Every environment and sandbox, destroyed through the API so that the control plane's records
 * agree. Those on a host that is not online (a test stopped its denvd, or removed the host) are
 * left to the engine's removal: a destroy there would wait for a host that does not answer.
 */
async function destroyEnvironments(client: DenvClient): Promise<void> {
  const online = new Set((await client.listHosts()).filter((h) => h.status === "online").map((h) => h.id));
  const envs = (
    await Promise.all((await client.listProjects()).map((p) => client.listEnvironments(p.name)))
  ).flat();
  const failures: string[] = [];
  await Promise.all(
    envs.map(async (e) => {
      if (e.host_id !== undefined && !online.has(e.host_id)) return;
      try {
        if (e.sandbox) await client.deleteSandbox(e.id, { wait: true });
        else {
          const d = await client.destroy(e.id, { wait: true, signal: AbortSignal.timeout(120_000) });
          if (d.status !== "succeeded") failures.push(`${e.id}: ${d.error?.message ?? d.status}`);
        }
      } catch (err) {
        failures.push(`${e.id}: ${(err as Error).message}`);
      }
    }),
  );
  if (failures.length > 0) throw new Error(failures.join("; "));
}
