import { mkdir, readdir, readFile, rm } from "node:fs/promises";
import { join } from "node:path";
import { type App, buildApp } from "./app.js";
import { CpConfig, type CpConfigInput, resolvePaths } from "./config.js";
import { DeploymentEngine } from "./engine/engine.js";
import { DeploymentEvents } from "./engine/events.js";
import { HostLoad } from "./engine/host-load.js";
import { Placer } from "./engine/placement.js";
import { GithubApp } from "./github/github-app.js";
import { GithubService } from "./github/github-service.js";
import { Metrics } from "./http/metrics.js";
import { DEFAULT_WEB_DIR } from "./http/web-assets.js";
import { HostHub } from "./hub/hub.js";
import { errorMessage, jsonLog, type Log } from "./log.js";
import type { Principal } from "./services/access.js";
import { AuthService } from "./services/auth-service.js";
import type { Services } from "./services/container.js";
import { DeploymentService } from "./services/deployment-service.js";
import { EnvironmentService } from "./services/environment-service.js";
import { EpisodeRecorder } from "./services/episode-recorder.js";
import { HostListCache } from "./services/host-list-cache.js";
import { HostService } from "./services/host-service.js";
import { PoolService } from "./services/pool-service.js";
import { ProjectService } from "./services/project-service.js";
import { ReplayService } from "./services/replay-service.js";
import { SandboxService } from "./services/sandbox-service.js";
import { TargetService } from "./services/target-service.js";
import { VersionService } from "./services/version-service.js";
import { openStore } from "./store/open-store.js";
import type { Store } from "./store/store.js";
import { watchedStore } from "./store/watched-store.js";
import { AwsDriver } from "./targets/aws-driver.js";
import { BridgeDriver, BridgeProcesses } from "./targets/bridge-driver.js";
import { readCpId } from "./targets/cp-id.js";
import { DaytonaDockerDriver } from "./targets/daytona-docker-driver.js";
import { DenvdDriver, TargetDrivers } from "./targets/driver.js";
import { HetznerDriver } from "./targets/hetzner-driver.js";
import { BundleFile, DEFAULT_DENVD_BUNDLE } from "./targets/install-assets.js";
import type { ProvisionDeps } from "./targets/provisioned-driver.js";
import { SecretBox } from "./targets/secret-box.js";
import { cpVersion } from "./version.js";

export type ControlPlaneOptions = CpConfigInput & {
  /** Logger (default: JSON lines on stderr at the configured level). */
  log?: Log;
  /** Heartbeat interval of host streams (tests shorten it). */
  heartbeatMs?: number;
  /** How often warm fork pools are refilled, besides after each claim (tests shorten it). */
  poolIntervalMs?: number;
  /** The denvd bundle GET /v1/install/denvd.mjs serves (default packages/denvd/dist/bundle/denvd.mjs). */
  denvdBundle?: string;
};

export interface ControlPlane {
  /** Where the API listens (http://host:port). */
  url: string;
  /** The admin token (read from, or written to, the admin token file). */
  adminToken: string;
  /** Stops gracefully: running deployments stay running in the store and resume at the next start. */
  close(): Promise<void>;
}

/** The identity the sandbox sweeper acts as. */
const SWEEPER: Principal = { tokenId: "system", name: "sandbox sweeper", role: "admin" };
/** The identity warm fork pools fork and destroy as. */
const POOLS: Principal = { tokenId: "system", name: "pools", role: "admin" };
/** The identity provisioned targets remove the hosts of deleted machines as. */
const PROVISIONER: Principal = { tokenId: "system", name: "provisioner", role: "admin" };

/** Starts denv-cp in this process: store, hub, engine, HTTP; resumes unfinished deployments. */
export async function startControlPlane(options: ControlPlaneOptions): Promise<ControlPlane> {
  const config = CpConfig.parse(options);
  const log = options.log ?? jsonLog(config.logLevel);
  const paths = resolvePaths(config);
  await mkdir(config.dataDir, { recursive: true, mode: 0o700 });
  const spoolDir = join(config.dataDir, "spool");

  const { store, hostList, hostLoad } = watchHosts(
    await openStore(paths.databaseUrl, {
      onConnectionError: (err) => log.warn("database connection lost", { error: errorMessage(err) }),
    }),
  );
  // The hub is the hosts' lifecycle and the hosts close the hub's streams: a late-bound call.
  const hosts = new HostService(store, hostList, log, (id, reason) => hub.disconnect(id, reason));
  const hub = new HostHub({
    lifecycle: hosts,
    log,
    heartbeatMs: options.heartbeatMs || undefined,
  });
  const auth = new AuthService(store);
  const box = await SecretBox.open({
    key: config.credentialKey,
    previous: config.credentialKeysPrevious,
    file: join(config.dataDir, "credential-key"),
  });
  const provision: ProvisionDeps = {
    store,
    box,
    log,
    hub,
    cpId: await readCpId(join(config.dataDir, "cp-id")),
    publicUrl: () => services.publicUrl,
    mintJoinToken: async (target) => {
      const jt = await targets.mintJoinToken(target, {
        uses: 1,
        ttl_sec: Math.ceil(config.provisionJoinTimeoutMs / 1000),
      });
      return { id: jt.id, secret: jt.token ?? "" };
    },
    revokeJoinToken: async (target, id) =>
      void (await store.revokeJoinToken(target, id, new Date().toISOString())),
    removeHost: async (id) => void (await hosts.remove(PROVISIONER, id, true)),
    joinTimeoutMs: config.provisionJoinTimeoutMs,
  };
  // Hosted targets' bridges dial this control plane on this machine: its own address, on loopback.
  let localUrl = "";
  const bridges = new BridgeProcesses({
    dir: join(config.dataDir, "bridges"),
    bundle: options.denvdBundle ?? DEFAULT_DENVD_BUNDLE,
    cpUrl: () => localUrl,
    log,
  });
  const drivers = new TargetDrivers()
    .register(new DenvdDriver("hosts", hub))
    .register(new HetznerDriver(provision))
    .register(new AwsDriver(provision))
    .register(new DaytonaDockerDriver(provision))
    .register(new BridgeDriver("e2b", provision, bridges))
    .register(new BridgeDriver("daytona", provision, bridges))
    .register(new BridgeDriver("prime", provision, bridges))
    .register(new BridgeDriver("modal", provision, bridges));
  const targets = new TargetService(store, drivers, box, log, {
    bundle: new BundleFile(options.denvdBundle ?? DEFAULT_DENVD_BUNDLE),
    version: cpVersion(),
    removeHost: async (id) => void (await hosts.remove(PROVISIONER, id, true)),
  });
  await hosts.markAllOffline();
  await targets.ensureLocal();
  await targets.resealCredentials();
  const adminToken = await auth.ensureAdminToken(paths.adminTokenFile);

  const versions = new VersionService(store, hub, log, {
    retain: config.retainVersions,
    commandTimeoutMs: config.commandTimeoutMs,
  });
  const engine = new DeploymentEngine({
    store,
    hub,
    placer: new Placer(
      store,
      hub,
      { hosts: hostList, load: hostLoad },
      {
        overcommit: {
          memory: config.placementOvercommitMemory,
          cpus: config.placementOvercommitCpus,
          pids: config.placementOvercommitPids,
        },
        transferMbps: config.placementTransferMbps,
      },
      drivers,
    ),
    events: new DeploymentEvents(),
    log,
    commandTimeoutMs: config.commandTimeoutMs,
    resumeTimeoutMs: config.resumeTimeoutMs,
    transferPath: config.transferPath,
    afterVersion: (project) => versions.applyRetention(project),
    gitAuthorization: async (project): Promise<string | undefined> =>
      (await github.gitSource(project))?.authorization,
    afterDeploy: (project: string, size: number | undefined): Promise<void> =>
      pools.recordFileSize(project, size),
  });
  const projects = new ProjectService(store, versions);
  const deployments = new DeploymentService(
    store,
    engine,
    projects,
    { spoolDir, maxSourceBytes: config.maxSourceBytes },
    async (project): Promise<string | undefined> => (await github.gitSource(project))?.url,
  );
  const pools = new PoolService(store, deployments, hub, log, POOLS, {
    commandTimeoutMs: config.commandTimeoutMs,
    intervalMs: options.poolIntervalMs || 2000,
  });
  const github: GithubService = new GithubService(store, engine, projects, deployments, log, {
    app:
      config.githubAppId && config.githubPrivateKeyFile
        ? new GithubApp({
            appId: config.githubAppId,
            privateKeyPem: await readFile(config.githubPrivateKeyFile, "utf8"),
            apiUrl: config.githubApiUrl,
          })
        : undefined,
    webhookSecret: config.githubWebhookSecret,
    webUrl: config.githubWebUrl,
    publicUrl: () => services.publicUrl,
  });
  const [host, port] = splitListen(config.listen);
  const environments = new EnvironmentService(store, hub, projects, config.commandTimeoutMs);
  const episodes = new EpisodeRecorder(store);
  const services: Services = {
    store,
    hub,
    metrics: new Metrics(),
    auth,
    projects,
    environments,
    episodes,
    replays: new ReplayService(store, environments, deployments, episodes),
    deployments,
    versions,
    sandboxes: new SandboxService(store, deployments, environments, hub, log, pools),
    pools,
    targets,
    hosts,
    github,
    publicUrl: config.publicUrl ?? `http://${config.listen}`,
  };

  let app: App;
  try {
    app = await buildApp({
      services,
      log,
      corsOrigins: config.corsOrigins,
      webDir: config.webDir ?? DEFAULT_WEB_DIR,
    });
    await app.fastify.listen({ host, port });
  } catch (err) {
    await hub.close();
    await store.close();
    throw err;
  }
  const address = app.fastify.server.address();
  const actualPort = typeof address === "object" && address ? address.port : port;
  const url = `http://${urlHost(host)}:${actualPort}`;
  if (!config.publicUrl) services.publicUrl = url;
  localUrl = `http://${urlHost(loopbackFor(host))}:${actualPort}`;

  await removeStaleSpools(spoolDir, store);
  // Check runs first, so that the resumed deployments' phases reach them.
  await github.resume();
  const resumed = await engine.resumeAll();
  // Sandboxes whose destroy a previous process answered but did not finish.
  await services.sandboxes
    .resume(SWEEPER)
    .catch((err: unknown) => log.warn("resuming sandbox destroys failed", { error: errorMessage(err) }));
  const sweeper = setInterval(() => {
    services.sandboxes
      .sweep(SWEEPER)
      .catch((err: unknown) => log.warn("sandbox sweep failed", { error: errorMessage(err) }));
  }, config.sandboxSweepMs);
  sweeper.unref();
  let reconciling = false;
  const provisioner = setInterval(() => {
    if (reconciling) return;
    reconciling = true;
    void targets.reconcileAll().finally(() => {
      reconciling = false;
    });
  }, config.provisionIntervalMs);
  provisioner.unref();
  pools.start();
  log.info("control plane started", { url, resumed });

  let closed: Promise<void> | undefined;
  return {
    url,
    adminToken,
    close: () => {
      closed ??= (async () => {
        clearInterval(sweeper);
        clearInterval(provisioner);
        await pools.stop();
        // Bridges stop before the hub: they hold their commands' journals, and start again with the next control plane.
        await bridges.close();
        // The engine stops first so the commands the hub abandons leave deployments resumable.
        const drained = engine.shutdown();
        await hub.close();
        await drained;
        await app.fastify.close();
        await store.close();
        log.info("control plane stopped");
      })();
      return closed;
    },
  };
}

/**
 * What the control plane keeps in memory about hosts (the host list, what each host holds), built
 * from `opened`, and the store everything else must write through: it tells both about every write
 * of a host or an environment row.
 */
export function watchHosts(opened: Store): { store: Store; hostList: HostListCache; hostLoad: HostLoad } {
  const hostList = new HostListCache(opened);
  const hostLoad = new HostLoad(opened);
  const store = watchedStore(opened, {
    hostsChanged: () => hostList.invalidate("hosts"),
    environmentChanged: (change) => {
      hostList.invalidate("environments");
      hostLoad.apply(change);
    },
  });
  return { store, hostList, hostLoad };
}

function splitListen(listen: string): [string, number] {
  const i = listen.lastIndexOf(":");
  return [listen.slice(0, i).replace(/^\[|\]$/g, ""), Number(listen.slice(i + 1))];
}

/** Spooled sources of deployments that ended while the cp was down are not kept. */
async function removeStaleSpools(dir: string, store: Services["store"]): Promise<void> {
  let names: string[];
  try {
    names = await readdir(dir);
  } catch {
    return;
  }
  const open = new Set((await store.listDeployments({ statuses: ["queued", "running"] })).map((d) => d.id));
  for (const n of names) {
    if (!open.has(n.replace(/\.(tar|upload)$/, ""))) await rm(join(dir, n), { force: true });
  }
}

/** A listen address as a URL's host: an IPv6 address in brackets. */
function urlHost(host: string): string {
  return host.includes(":") && !host.startsWith("[") ? `[${host}]` : host;
}

/** Where a process on this machine reaches a listener on `host`: loopback for the wildcards. */
function loopbackFor(host: string): string {
  if (host === "0.0.0.0" || host === "") return "127.0.0.1";
  if (host === "::") return "::1";
  return host;
}
