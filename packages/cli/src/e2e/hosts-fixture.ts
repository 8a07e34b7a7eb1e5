import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import { promisify } from "node:util";
import { DenvClient } from "@denv/sdk";
import {
  cleanEnv,
  debugFlags,
  freePort,
  keepLog,
  type Proc,
  running,
  startProc,
  stopProc,
  waitUntil,
} from "./fixture-procs.js";
import { startEngine } from "./hosts-engines.js";
import {
  destroyEnvironments,
  forwardRule,
  freeSubnet,
  LIB_ROOT,
  PREFIX,
  RUN_ROOT,
  startTime,
  sweepStaleHosts,
  teardown,
} from "./hosts-teardown.js";
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
 * sweepStaleHosts() (hosts-teardown.ts) removes what an earlier run that died left behind; the
 * engines start in hosts-engines.ts, and fixture-procs.ts starts, waits for and stops programs.
 */

const BASE_IMAGE = "debian:bookworm-slim";
const CP_BIN = path.join(repo, "packages/cp/dist/main.js");
const DENVD_BIN = path.join(repo, "packages/denvd/dist/main.js");

const sh = promisify(execFile);

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

    const engines = hosts.map((h, i) =>
      startEngine(h, {
        peer: `${PREFIX}${id}p${i}`,
        bridge,
        saved,
        baseTar,
        started: (p) => procs.dockerd.set(h.spec.name, p),
      }),
    );
    // allSettled: a failure is thrown only once every engine is settled, so none starts after the teardown.
    const settled = await Promise.allSettled([cpReady, saved, ...engines]);
    const failed = settled.find((s): s is PromiseRejectedResult => s.status === "rejected");
    if (failed) throw failed.reason;
    rmSync(baseTar, { force: true });
    stage("engines");

    const token = readFileSync(adminTokenFile, "utf8").trim();
    const client = new DenvClient({ url, token });
    // No hosts: a control plane alone on the bridge (machines join it later, e.g. machine.ts's).
    const join =
      hosts.length > 0
        ? await client.createJoinToken("local", { uses: hosts.length, ttl_sec: 600 })
        : undefined;
    if (hosts.length > 0 && join?.token === undefined)
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
            join?.token as string,
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
