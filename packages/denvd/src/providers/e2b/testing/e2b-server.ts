import { randomBytes } from "node:crypto";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { ApiError } from "./e2b-api-error.js";
import { Engine, EngineError } from "./e2b-docker.js";
import { Envd } from "./e2b-envd.js";
import { homeOf } from "./e2b-files.js";
import { TemplateBuilds, type TemplateRuntime } from "./e2b-templates.js";

/**
 * The E2B sandbox service (https://e2b.dev) on 127.0.0.1 for tests, as the official `e2b` SDK
 * (2.51.0) calls it: its control API at `apiUrl` (X-API-KEY; errors as {"code", "message"}) and
 * envd, the in-sandbox daemon, at `sandboxUrl` (see e2b-envd.ts). Each sandbox is a container of a
 * local image, `sleep infinity`; a snapshot is a `docker commit` of one, usable where a template
 * id is. Everything it makes carries LABELS plus `ai.denv.e2b.server=<this server's id>`, and
 * close() removes all of it.
 *
 * Routes: POST /v2/sandboxes, GET /v2/sandboxes (metadata/state filters, limit and nextToken with
 * the `x-next-token` header), GET and DELETE /sandboxes/{id}, POST /sandboxes/{id}/timeout,
 * POST /v2/sandboxes/{id}/connect, POST /sandboxes/{id}/snapshots, GET /snapshots,
 * DELETE /templates/{snapshotID or templateID}.
 *
 * Template builds (see e2b-templates.ts): POST /v3/templates (a template by name, and a build),
 * GET /templates/{templateID}/files/{hash} (`present`, and an upload URL on this server:
 * PUT /uploads/{token}, no API key, as a presigned URL needs none),
 * POST /v2/templates/{templateID}/builds/{buildID} (base and steps),
 * GET /templates/{templateID}/builds/{buildID}/status (status, log entries from `logsOffset`,
 * `reason` on error), GET /templates/aliases/{alias}. `Sandbox.create("<name>[:<tag>]")` starts
 * the build's image with its last user and workdir as the defaults of envd's calls, then runs its
 * start command in the background as that user and waits until its ready command exits 0.
 *
 * A sandbox created with `allow_internet_access: false` joins a Docker `internal` network: no
 * route out and no reach to sandboxes on the other network. Docker's internal mode filters only
 * forwarded traffic, so such a sandbox still reaches the host's own addresses (its gateway);
 * tests that need that closed too need a host firewall rule this double does not add.
 */
const LABELS = { "ai.denv.managed": "true", "ai.denv.test": "e2b-server" } as const;

/** The envd version this server claims: new enough for every call it implements. */
const ENVD_VERSION = "0.5.7";
const DEFAULT_TIMEOUT_S = 300;
/** How long a sandbox's creation waits for its template's ready command to pass. */
const READY_TIMEOUT_MS = 30_000;

export interface E2bServerOptions {
  apiKey: string;
  /** Template id or alias -> local Docker image (never pulled). */
  templates: Record<string, string>;
  /** Image names a template build's `fromImage` may give -> local Docker images (never pulled). */
  baseImages?: Record<string, string>;
  socketPath?: string;
}

export interface FakeSandbox {
  sandboxID: string;
  templateID: string;
  containerId: string;
  envdAccessToken: string;
  metadata: Record<string, string>;
  allowInternetAccess: boolean;
  startedAt: Date;
  endAt: Date;
  /** Paused (E2B's pause: the container frozen, no timeout running) until a connect resumes it. */
  paused?: boolean;
  /** The built template's name, user and workdir defaults, and resources, when it has them. */
  alias?: string;
  user?: string;
  workdir?: string;
  cpuCount?: number;
  memoryMB?: number;
  /** The template's start and ready commands, which a sandbox from its snapshot runs again. */
  startCmd?: string;
  readyCmd?: string;
}

interface Snapshot {
  snapshotID: string;
  rawId: string;
  names: string[];
  image: string;
  sandboxID: string;
  user?: string;
  workdir?: string;
  startCmd?: string;
  readyCmd?: string;
}

export class E2bServer {
  readonly id = randomBytes(4).toString("hex");
  readonly sandboxes = new Map<string, FakeSandbox>();
  readonly snapshots = new Map<string, Snapshot>();
  apiUrl = "";
  sandboxUrl = "";
  /** The networks sandboxes join: `open` reaches out, `internal` (Docker's internal) does not. */
  readonly networks = { open: "", internal: "" };
  private readonly engine: Engine;
  private readonly envd: Envd;
  private readonly builds: TemplateBuilds;
  private readonly timers = new Map<string, NodeJS.Timeout>();
  private api?: Server;
  private sandboxHost?: Server;

  /** Every path envd served a read of (GET /files), over all sandboxes. */
  get fileReads(): readonly string[] {
    return this.envd.files.reads;
  }

  constructor(private readonly opts: E2bServerOptions) {
    this.engine = new Engine(opts.socketPath);
    this.envd = new Envd(this.engine, (id) => this.sandboxes.get(id));
    this.builds = new TemplateBuilds({
      engine: this.engine,
      labels: this.labels,
      baseImages: opts.baseImages ?? {},
      resolve: (ref) => this.runtime(ref),
      uploadUrl: (token) => `${this.apiUrl}/uploads/${token}`,
    });
  }

  get labels(): Record<string, string> {
    return { ...LABELS, "ai.denv.e2b.server": this.id };
  }

  async start(): Promise<this> {
    for (const kind of ["open", "internal"] as const) {
      const { Id } = await this.engine.call<{ Id: string }>("POST", "/networks/create", {
        Name: `denv-e2b-${this.id}-${kind}`,
        Driver: "bridge",
        Internal: kind === "internal",
        Labels: this.labels,
      });
      this.networks[kind] = Id;
    }
    this.api = await listen((req, res, body) => this.handleApi(req, res, body));
    this.sandboxHost = await listen((req, res, body) => this.envd.handle(req, res, body));
    this.apiUrl = `http://127.0.0.1:${(this.api.address() as AddressInfo).port}`;
    this.sandboxUrl = `http://127.0.0.1:${(this.sandboxHost.address() as AddressInfo).port}`;
    return this;
  }

  /** Stops listening and removes every container, image and network labelled as this server's. */
  async close(): Promise<void> {
    for (const t of this.timers.values()) clearTimeout(t);
    this.timers.clear();
    for (const s of [this.api, this.sandboxHost]) {
      s?.closeAllConnections();
      await new Promise<void>((r) => (s ? s.close(() => r()) : r()));
    }
    await this.builds.settle();
    const filter = encodeURIComponent(JSON.stringify({ label: [`ai.denv.e2b.server=${this.id}`] }));
    const errors: unknown[] = [];
    const attempt = async (what: Promise<unknown>) => what.catch((e: unknown) => errors.push(e));
    const containers = await this.engine.call<Array<{ Id: string }>>(
      "GET",
      `/containers/json?all=1&filters=${filter}`,
    );
    for (const c of containers) await attempt(this.engine.call("DELETE", `/containers/${c.Id}?force=1&v=1`));
    await attempt(this.engine.removeImages(`ai.denv.e2b.server=${this.id}`));
    const networks = await this.engine.call<Array<{ Id: string }>>("GET", `/networks?filters=${filter}`);
    for (const n of networks) await attempt(this.engine.call("DELETE", `/networks/${n.Id}`));
    this.sandboxes.clear();
    this.snapshots.clear();
    if (errors.length > 0) throw new AggregateError(errors, `E2bServer ${this.id}: cleanup failed`);
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  private async handleApi(req: IncomingMessage, res: ServerResponse, raw: Buffer): Promise<void> {
    const send = (status: number, body?: unknown, headers: Record<string, string> = {}) => {
      // An empty answer says so with its length: the SDK reads any other as JSON.
      res.writeHead(
        status,
        body === undefined
          ? { "content-length": "0", ...headers }
          : { "content-type": "application/json", ...headers },
      );
      res.end(body === undefined ? undefined : JSON.stringify(body));
    };
    const url = new URL(req.url ?? "/", "http://x");
    try {
      const upload = /^\/uploads\/(\w+)$/.exec(url.pathname);
      if (upload && req.method === "PUT") {
        await this.builds.upload(upload[1] ?? "", raw);
        return send(200);
      }
      if (req.headers["x-api-key"] !== this.opts.apiKey) throw new ApiError(401, "Invalid API key");
      let body: Record<string, unknown> = {};
      if (raw.length > 0) {
        try {
          body = JSON.parse(raw.toString()) as Record<string, unknown>;
        } catch {
          throw new ApiError(400, "request body is not JSON");
        }
      }
      const route = `${req.method} ${url.pathname}`;
      if (route === "POST /v2/sandboxes") return send(201, this.created(await this.create(body)));
      if (route === "GET /v2/sandboxes") {
        const { page, next } = this.list(url.searchParams);
        return send(200, page, next ? { "x-next-token": next } : {});
      }
      if (route === "GET /snapshots") return send(200, this.listSnapshots(url.searchParams));
      if (route === "POST /v3/templates") return send(202, this.builds.request(body));
      const files = /^\/templates\/([^/]+)\/files\/([^/]+)$/.exec(url.pathname);
      if (files && req.method === "GET")
        return send(201, this.builds.uploadLink(files[1] ?? "", files[2] ?? ""));
      const build = /^(\/v2)?\/templates\/([^/]+)\/builds\/([^/]+)(\/status)?$/.exec(url.pathname);
      const [, buildV2, buildTemplate = "", buildID = "", buildStatus] = build ?? [];
      if (build && req.method === "POST" && buildV2 && !buildStatus) {
        await this.builds.start(buildTemplate, buildID, body);
        return send(202);
      }
      if (build && req.method === "GET" && !buildV2 && buildStatus)
        return send(200, this.builds.status(buildTemplate, buildID, url.searchParams));
      const alias = /^\/templates\/aliases\/([^/]+)$/.exec(url.pathname);
      if (alias && req.method === "GET")
        return send(200, this.builds.alias(decodeURIComponent(alias[1] ?? "")));
      const m = /^(\/v2)?\/(sandboxes|templates)\/([^/]+)(?:\/(\w+))?$/.exec(url.pathname);
      const [, v2, collection, id = "", action] = m ?? [];
      if (collection === "templates" && req.method === "DELETE" && !action && !v2) {
        const ref = decodeURIComponent(id);
        if (!(await this.builds.delete(ref))) await this.deleteSnapshot(ref);
        return send(204);
      }
      if (collection === "sandboxes") {
        const sb = this.sandboxes.get(id);
        if (!sb) throw new ApiError(404, `sandbox "${id}" doesn't exist or you don't have access to it`);
        const call = `${req.method} ${v2 ?? ""}/${action ?? ""}`;
        if (call === "GET /") return send(200, this.detail(sb));
        if (call === "DELETE /") {
          await this.kill(sb);
          return send(204);
        }
        if (call === "POST /timeout") {
          if (sb.paused) throw new ApiError(409, `sandbox "${id}" is paused`);
          this.schedule(sb, Number(body.timeout ?? DEFAULT_TIMEOUT_S));
          return send(204);
        }
        if (call === "POST /pause") {
          if (sb.paused) throw new ApiError(409, `sandbox "${id}" is already paused`);
          await this.engine.call("POST", `/containers/${sb.containerId}/pause`);
          clearTimeout(this.timers.get(sb.sandboxID));
          this.timers.delete(sb.sandboxID);
          sb.paused = true;
          return send(204);
        }
        if (call === "POST /v2/connect") {
          const seconds = Number(body.timeout ?? DEFAULT_TIMEOUT_S);
          if (sb.paused) {
            // A resume: the container goes on where it was frozen, with a new timeout.
            await this.engine.call("POST", `/containers/${sb.containerId}/unpause`);
            sb.paused = false;
            this.schedule(sb, seconds);
            return send(201, this.created(sb));
          }
          const end = Date.now() + seconds * 1000;
          if (end > sb.endAt.getTime()) this.schedule(sb, (end - Date.now()) / 1000);
          return send(200, this.created(sb));
        }
        if (call === "POST /snapshots") return send(201, await this.snapshot(sb, body.name));
      }
      throw new ApiError(404, `no route ${req.method} ${url.pathname}`);
    } catch (e) {
      if (e instanceof ApiError) return send(e.status, { code: e.status, message: e.message });
      send(500, { code: 500, message: String(e) });
    }
  }

  /** Replaces the API key the server takes (the old one is refused from now on: a revoked key). */
  setApiKey(key: string): void {
    this.opts.apiKey = key;
  }

  /** The names of the templates built on this server and not deleted. */
  templates(): string[] {
    return this.builds.names();
  }

  private created(sb: FakeSandbox): object {
    return {
      sandboxID: sb.sandboxID,
      templateID: sb.templateID,
      clientID: "local",
      envdVersion: ENVD_VERSION,
      envdAccessToken: sb.envdAccessToken,
      domain: null,
    };
  }

  private detail(sb: FakeSandbox): object {
    return {
      ...this.created(sb),
      ...(sb.alias ? { alias: sb.alias } : {}),
      metadata: sb.metadata,
      allowInternetAccess: sb.allowInternetAccess,
      startedAt: sb.startedAt.toISOString(),
      endAt: sb.endAt.toISOString(),
      state: sb.paused ? "paused" : "running",
      cpuCount: sb.cpuCount ?? 2,
      memoryMB: sb.memoryMB ?? 512,
      diskSizeMB: 1024,
    };
  }

  /**
   * What a snapshot id (`<id>:default`) or name, a built template's id or name (`[:tag]`), or a
   * template of the `templates` option stands for.
   */
  private runtime(templateID: string): TemplateRuntime {
    const ref = templateID.replace(/:default$/, "").replace(/^local\//, "");
    for (const s of this.snapshots.values())
      if (s.rawId === ref || s.snapshotID === templateID || s.names.includes(templateID))
        return {
          templateID,
          image: s.image,
          user: s.user,
          workdir: s.workdir,
          startCmd: s.startCmd,
          readyCmd: s.readyCmd,
        };
    const built = this.builds.find(templateID);
    if (built) return built;
    const image = this.opts.templates[templateID];
    if (!image) throw new ApiError(404, `template '${templateID}' not found`);
    return { templateID, image };
  }

  private async create(body: Record<string, unknown>): Promise<FakeSandbox> {
    if (typeof body.templateID !== "string") throw new ApiError(400, "templateID is required");
    const rt = this.runtime(body.templateID);
    const allowInternetAccess = body.allow_internet_access !== false;
    const sandboxID = `i${randomBytes(10).toString("hex")}`;
    const envs = (body.envVars ?? {}) as Record<string, string>;
    const { Id } = await this.engine.call<{ Id: string }>(
      "POST",
      `/containers/create?name=denv-e2b-${this.id}-${sandboxID}`,
      {
        Image: rt.image,
        Cmd: ["sleep", "infinity"],
        Entrypoint: [],
        Env: Object.entries(envs).map(([k, v]) => `${k}=${v}`),
        Labels: { ...this.labels, "ai.denv.e2b.sandbox": sandboxID },
        HostConfig: {
          NetworkMode: this.networks[allowInternetAccess ? "open" : "internal"],
          Init: true,
          // Root in an E2B sandbox (a VM) has every capability; the engine's default set lacks the
          // one that reads another user's /proc/PID/environ.
          CapAdd: ["SYS_PTRACE"],
          ...(rt.cpuCount ? { NanoCpus: rt.cpuCount * 1e9 } : {}),
          ...(rt.memoryMB ? { Memory: rt.memoryMB * 1024 * 1024 } : {}),
        },
      },
    );
    await this.engine.call("POST", `/containers/${Id}/start`);
    const now = new Date();
    const sb: FakeSandbox = {
      sandboxID,
      templateID: rt.templateID,
      containerId: Id,
      envdAccessToken: randomBytes(16).toString("hex"),
      metadata: (body.metadata ?? {}) as Record<string, string>,
      allowInternetAccess,
      startedAt: now,
      endAt: now,
      alias: rt.alias,
      user: rt.user,
      workdir: rt.workdir,
      cpuCount: rt.cpuCount,
      memoryMB: rt.memoryMB,
      startCmd: rt.startCmd,
      readyCmd: rt.readyCmd,
    };
    this.sandboxes.set(sandboxID, sb);
    this.schedule(sb, Number(body.timeout ?? DEFAULT_TIMEOUT_S));
    try {
      await this.startCommands(sb, rt, envs);
    } catch (e) {
      await this.kill(sb);
      throw e;
    }
    return sb;
  }

  /**
   * A built template's start command, in the background as its user in its workdir, then its ready
   * command until it exits 0. E2B runs them once at build time and snapshots the running sandbox;
   * here each sandbox runs them when it is created. A snapshot of E2B's holds the sandbox's memory,
   * its running processes with it; here a `docker commit` holds only the files, so a sandbox from a
   * snapshot runs the template's start command again on them (what a process the snapshot held
   * would have been doing is not kept).
   */
  private async startCommands(sb: FakeSandbox, rt: TemplateRuntime, env: Record<string, string>) {
    const user = sb.user ?? "user";
    const run = { user, cwd: sb.workdir ?? homeOf(user), env };
    if (rt.startCmd)
      await this.engine.spawn(sb.containerId, { cmd: ["/bin/bash", "-l", "-c", rt.startCmd], ...run });
    if (!rt.readyCmd) return;
    const deadline = Date.now() + READY_TIMEOUT_MS;
    for (;;) {
      const r = await this.engine.exec(sb.containerId, {
        cmd: ["/bin/bash", "-l", "-c", rt.readyCmd],
        ...run,
      });
      if (r.exitCode === 0) return;
      if (Date.now() > deadline)
        throw new ApiError(
          500,
          `template '${rt.alias ?? rt.templateID}': its ready command \`${rt.readyCmd}\` did not pass within ` +
            `${READY_TIMEOUT_MS / 1000} s (last exit code ${r.exitCode}: ${r.stderr.toString().trim()})`,
        );
      await new Promise((r) => setTimeout(r, 200));
    }
  }

  /** A running sandbox ends when its timeout passes, as E2B kills it then (no auto-pause here). */
  private schedule(sb: FakeSandbox, seconds: number): void {
    clearTimeout(this.timers.get(sb.sandboxID));
    sb.endAt = new Date(Date.now() + seconds * 1000);
    const timer = setTimeout(() => void this.kill(sb).catch(() => undefined), seconds * 1000);
    timer.unref();
    this.timers.set(sb.sandboxID, timer);
  }

  private async kill(sb: FakeSandbox): Promise<void> {
    clearTimeout(this.timers.get(sb.sandboxID));
    this.timers.delete(sb.sandboxID);
    this.sandboxes.delete(sb.sandboxID);
    await this.engine.call("DELETE", `/containers/${sb.containerId}?force=1&v=1`).catch((e: unknown) => {
      if (!(e instanceof EngineError && e.status === 404)) throw e;
    });
  }

  private list(q: URLSearchParams): { page: object[]; next?: string } {
    const wanted = new URLSearchParams(q.get("metadata") ?? "");
    // The SDK sends `state` once per value; one comma-separated value is read as well.
    const asked = q.getAll("state").flatMap((v) => v.split(","));
    const states = asked.length > 0 ? asked : ["running", "paused"];
    const all = [...this.sandboxes.values()]
      .filter((sb) => states.includes(sb.paused ? "paused" : "running"))
      .filter((sb) => [...wanted].every(([k, v]) => sb.metadata[k] === v))
      .filter((sb) => !q.get("template") || sb.templateID === q.get("template"))
      .sort(
        (a, b) => a.startedAt.getTime() - b.startedAt.getTime() || a.sandboxID.localeCompare(b.sandboxID),
      );
    const from = Number(q.get("nextToken") ?? 0);
    const limit = Number(q.get("limit") ?? 100);
    const page = all.slice(from, from + limit).map((sb) => this.detail(sb));
    return { page, next: from + limit < all.length ? String(from + limit) : undefined };
  }

  private async snapshot(sb: FakeSandbox, name: unknown): Promise<object> {
    const rawId = randomBytes(8).toString("hex");
    const image = `denv-e2b-snap/${rawId}`;
    const labels = { ...this.labels, "ai.denv.e2b.snapshot": rawId };
    await this.engine.call("POST", `/commit?container=${sb.containerId}&repo=${image}&tag=latest`, {
      Labels: labels,
    });
    const names = typeof name === "string" && name !== "" ? [`local/${name}:default`] : [];
    const s: Snapshot = {
      snapshotID: names[0] ?? `${rawId}:default`,
      rawId,
      names,
      image,
      sandboxID: sb.sandboxID,
      user: sb.user,
      workdir: sb.workdir,
      startCmd: sb.startCmd,
      readyCmd: sb.readyCmd,
    };
    this.snapshots.set(rawId, s);
    return { snapshotID: s.snapshotID, names: s.names };
  }

  private listSnapshots(q: URLSearchParams): object[] {
    return [...this.snapshots.values()]
      .filter((s) => !q.get("sandboxID") || s.sandboxID === q.get("sandboxID"))
      .map((s) => ({ snapshotID: s.snapshotID, names: s.names }));
  }

  private async deleteSnapshot(ref: string): Promise<void> {
    const bare = ref.replace(/:default$/, "").replace(/^local\//, "");
    const s = [...this.snapshots.values()].find(
      (x) => x.rawId === bare || x.snapshotID === ref || x.names.includes(ref),
    );
    if (!s) throw new ApiError(404, `template '${ref}' not found`);
    this.snapshots.delete(s.rawId);
    // A sandbox made from it keeps the image's layers; close() removes what is left by label.
    await this.engine.call("DELETE", `/images/${encodeURIComponent(`${s.image}:latest`)}?force=1`);
  }
}

/** An HTTP server on 127.0.0.1 with an ephemeral port whose handler gets the whole body. */
async function listen(
  handler: (req: IncomingMessage, res: ServerResponse, body: Buffer) => Promise<void>,
): Promise<Server> {
  const server = createServer((req, res) => {
    void (async () => {
      const chunks: Buffer[] = [];
      for await (const c of req) chunks.push(c as Buffer);
      await handler(req, res, Buffer.concat(chunks));
    })().catch(() => {
      if (!res.headersSent) res.writeHead(500);
      res.end();
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return server;
}
