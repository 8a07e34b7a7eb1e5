import { randomBytes, randomUUID } from "node:crypto";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import type { Duplex } from "node:stream";
import { WebSocketServer } from "ws";
import { ApiError, errorBody } from "./daytona-api-error.js";
import { DaytonaDocker } from "./daytona-docker.js";
import { ObjectStorage } from "./daytona-object-storage.js";
import { type Sandbox, Sandboxes } from "./daytona-sandboxes.js";
import { Snapshots } from "./daytona-snapshots.js";
import { type Reply, Toolbox } from "./daytona-toolbox.js";

/**
 * Daytona (https://daytona.io) on 127.0.0.1 for tests, as the official `@daytonaio/sdk` (0.218.0)
 * calls it with `apiUrl: <url>/api`: the API under /api (Bearer API key; errors as NestJS's
 * {statusCode, message, error}) and the toolbox daemon of every sandbox under /toolbox/<id>
 * (the sandboxes' `toolboxProxyUrl` is <url>/toolbox). Build contexts go through moto's S3.
 * Everything it makes in Docker carries LABELS plus `ai.denv.daytona.server=<id>`; close()
 * removes all of it.
 *
 * API routes: POST/GET /sandbox, GET/DELETE /sandbox/{idOrName}, POST /sandbox/{id}/start|stop|
 * fork|snapshot|last-activity, POST /sandbox/{id}/autostop|autoarchive|autodelete/{n},
 * PUT /sandbox/{id}/labels, GET /sandbox/{id}/toolbox-proxy-url|build-logs-url|build-logs,
 * POST/GET /snapshots, GET/DELETE /snapshots/{idOrName}, GET /snapshots/{id}/build-logs-url|
 * build-logs, GET /object-storage/push-access. The SDK's Socket.IO event channel is refused, so
 * it polls. Toolbox routes: see daytona-toolbox.ts; a followed session log is a WebSocket.
 */
const LABELS = { "ai.denv.managed": "true", "ai.denv.test": "daytona-server" } as const;

export class DaytonaServer {
  readonly id = randomBytes(4).toString("hex");
  readonly organizationId = randomUUID();
  readonly docker: DaytonaDocker;
  readonly storage = new ObjectStorage();
  readonly snapshots: Snapshots;
  readonly sandboxes: Sandboxes;
  readonly toolbox: Toolbox;
  /** Every request served, as "METHOD /path" (no query), in order. */
  readonly requests: string[] = [];
  url = "";
  /** The bridge network's gateway: a host address sandboxes without networkBlockAll reach. */
  gateway = "";
  private network = "";
  private http?: Server;
  private readonly wss = new WebSocketServer({ noServer: true });

  constructor(private apiKey: string) {
    this.docker = new DaytonaDocker({ ...LABELS, "ai.denv.daytona.server": this.id });
    const repo = `denv-daytona-${this.id}`;
    this.snapshots = new Snapshots({
      docker: this.docker,
      storage: this.storage,
      organizationId: this.organizationId,
      repo,
    });
    this.sandboxes = new Sandboxes({
      docker: this.docker,
      storage: this.storage,
      snapshots: this.snapshots,
      organizationId: this.organizationId,
      repo,
      network: () => this.network,
      prefix: repo,
    });
    this.toolbox = new Toolbox(this.docker, this.sandboxes);
    this.sandboxes.onGone = (id) => this.toolbox.sessions.dropSandbox(id);
  }

  get labels(): Record<string, string> {
    return this.docker.labels;
  }

  async start(): Promise<this> {
    await this.storage.start();
    const net = await this.docker.createNetwork(`denv-daytona-${this.id}`);
    this.network = net.id;
    this.gateway = net.gateway;
    const server = createServer((req, res) => {
      void (async () => {
        const chunks: Buffer[] = [];
        for await (const c of req) chunks.push(c as Buffer);
        await this.handle(req, res, Buffer.concat(chunks));
      })().catch(() => {
        if (!res.headersSent) res.writeHead(500);
        res.end();
      });
    });
    server.on("upgrade", (req, socket, head) => this.upgrade(req, socket, head));
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    this.http = server;
    this.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    return this;
  }

  /** Stops listening, waits for builds, removes every labelled Docker object, stops moto. */
  async close(): Promise<void> {
    for (const c of this.wss.clients) c.terminate();
    this.http?.closeAllConnections();
    await new Promise<void>((r) => (this.http ? this.http.close(() => r()) : r()));
    await this.snapshots.settle();
    try {
      await this.docker.removeAll();
    } finally {
      this.sandboxes.all.clear();
      await this.storage.close();
    }
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  /** Replaces the API key (the old one is refused from now on). */
  setApiKey(key: string): void {
    this.apiKey = key;
  }

  private authorized(req: IncomingMessage): boolean {
    return req.headers.authorization === `Bearer ${this.apiKey}`;
  }

  private async handle(req: IncomingMessage, res: ServerResponse, raw: Buffer): Promise<void> {
    const url = new URL(req.url ?? "/", "http://x");
    const method = req.method ?? "GET";
    this.requests.push(`${method} ${url.pathname}`);
    const toolbox = /^\/toolbox\/([^/]+)(\/.*)$/.exec(url.pathname);
    const send = (r: Reply) => {
      if ("json" in r) {
        res.writeHead(r.status, { "content-type": "application/json" });
        res.end(JSON.stringify(r.json));
      } else if ("bytes" in r) {
        res.writeHead(r.status, { "content-type": r.contentType, "content-length": r.bytes.length });
        res.end(r.bytes);
      } else {
        res.writeHead(r.status, { "content-length": "0" });
        res.end();
      }
    };
    try {
      if (!this.authorized(req)) throw new ApiError(401, "Unauthorized");
      if (toolbox) {
        const w = this.toolbox.where(decodeURIComponent(toolbox[1] ?? ""));
        const ct = String(req.headers["content-type"] ?? "");
        return send(await this.toolbox.handle(method, toolbox[2] ?? "", url.searchParams, raw, ct, w));
      }
      const logs = /^\/api\/(sandbox|snapshots)\/([^/]+)\/build-logs$/.exec(url.pathname);
      if (logs && method === "GET")
        return this.buildLogs(res, logs[1] ?? "", decodeURIComponent(logs[2] ?? ""), url);
      return send(await this.api(method, url, raw));
    } catch (e) {
      const err = e instanceof ApiError ? e : new ApiError(500, e instanceof Error ? e.message : String(e));
      send({ status: err.status, json: errorBody(err, toolbox !== null, url.pathname) });
    }
  }

  private async api(method: string, url: URL, raw: Buffer): Promise<Reply> {
    let body: Record<string, unknown> = {};
    if (raw.length > 0) {
      try {
        body = JSON.parse(raw.toString()) as Record<string, unknown>;
      } catch {
        throw new ApiError(400, "request body is not JSON");
      }
    }
    const ok = (json: unknown, status = 200): Reply => ({ status, json });
    const path = url.pathname.replace(/^\/api/, "");
    const route = `${method} ${path}`;
    if (route === "GET /object-storage/push-access") return ok(this.storage.pushAccess(this.organizationId));
    if (route === "POST /snapshots") return ok(this.snapshots.dto(await this.snapshots.create(body)));
    if (route === "GET /snapshots") return ok(this.snapshots.list(url.searchParams));
    const snap = /^\/snapshots\/([^/]+)(\/build-logs-url)?$/.exec(path);
    if (snap) {
      const s = this.snapshots.get(decodeURIComponent(snap[1] ?? ""));
      if (method === "GET" && snap[2]) return ok({ url: `${this.url}/api/snapshots/${s.id}/build-logs` });
      if (method === "GET") return ok(this.snapshots.dto(s));
      if (method === "DELETE") {
        await this.snapshots.remove(s.id);
        return { status: 200 };
      }
    }
    if (route === "POST /sandbox") return ok(this.dto(this.sandboxes.create(body)));
    if (route === "GET /sandbox") {
      const { items, nextCursor } = this.sandboxes.list(url.searchParams);
      return ok({ items: items.map((sb) => this.dto(sb, false)), nextCursor });
    }
    const m = /^\/sandbox\/([^/]+)(?:\/([\w-]+))?(?:\/(\d+))?$/.exec(path);
    if (!m) throw new ApiError(404, `Cannot ${method} ${url.pathname}`);
    const sb = this.sandboxes.find(decodeURIComponent(m[1] ?? ""));
    const action = `${method} ${m[2] ?? ""}`;
    const n = Number(m[3] ?? 0);
    switch (action) {
      case "GET ":
        return ok(this.dto(sb));
      case "DELETE ":
        await this.sandboxes.remove(sb);
        return ok(this.dto(sb));
      case "POST start":
        this.sandboxes.start(sb);
        return ok(this.dto(sb));
      case "POST stop":
        this.sandboxes.stop(sb);
        return { status: 200 };
      case "POST fork":
        return ok(this.dto(this.sandboxes.fork(sb, body.name)));
      case "POST snapshot":
        this.sandboxes.snapshot(sb, body.name);
        return ok(this.dto(sb));
      case "PUT labels":
        sb.labels = (body.labels ?? {}) as Record<string, string>;
        return ok({ labels: sb.labels });
      case "POST autostop":
        sb.autoStopInterval = n;
        return { status: 200 };
      case "POST autoarchive":
        sb.autoArchiveInterval = n;
        return { status: 200 };
      case "POST autodelete":
        sb.autoDeleteInterval = n;
        return { status: 200 };
      case "POST last-activity":
        this.sandboxes.touch(sb);
        return { status: 201 };
      case "GET toolbox-proxy-url":
        return ok({ url: `${this.url}/toolbox` });
      case "GET build-logs-url":
        return ok({ url: `${this.url}/api/sandbox/${sb.id}/build-logs` });
    }
    throw new ApiError(404, `Cannot ${method} ${url.pathname}`);
  }

  /** A build's log as text; with `follow=true`, held open until the build ends. */
  private buildLogs(res: ServerResponse, kind: string, id: string, url: URL): void {
    const log = kind === "sandbox" ? this.sandboxes.find(id).log : this.snapshots.get(id).log;
    res.writeHead(200, { "content-type": "text/plain; charset=utf-8" });
    if (url.searchParams.get("follow") !== "true") {
      res.end(log.text());
      return;
    }
    const stop = log.follow((line) => (line === null ? res.end() : res.write(`${line}\n`)));
    res.on("close", stop);
  }

  /** The only WebSocket: a followed session command log (the SDK's getSessionCommandLogs). */
  private upgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void {
    // A client that resets the connection (the SDK's Socket.IO retries, a test closing) is no
    // error of the double's: an upgrade's socket has no other listener to take it.
    socket.on("error", () => undefined);
    const url = new URL(req.url ?? "/", "http://x");
    const m = /^\/toolbox\/([^/]+)\/process\/session\/([^/]+)\/command\/([^/]+)\/logs$/.exec(url.pathname);
    const refuse = (status: number) => {
      socket.end(`HTTP/1.1 ${status} Refused\r\nConnection: close\r\nContent-Length: 0\r\n\r\n`);
    };
    if (!m) {
      refuse(404);
      return;
    }
    if (!this.authorized(req)) {
      refuse(401);
      return;
    }
    let command: ReturnType<Toolbox["sessions"]["command"]>;
    try {
      const w = this.toolbox.where(decodeURIComponent(m[1] ?? ""));
      command = this.toolbox.sessions.command(
        w,
        decodeURIComponent(m[2] ?? ""),
        decodeURIComponent(m[3] ?? ""),
      );
    } catch (e) {
      refuse(e instanceof ApiError ? e.status : 500);
      return;
    }
    this.wss.handleUpgrade(req, socket, head, (ws) => {
      const stop = this.toolbox.sessions.follow(
        command,
        (frame) => ws.send(frame),
        () => ws.close(1000),
      );
      ws.on("close", stop);
      ws.on("error", stop);
    });
  }

  /** Sandbox (GET /sandbox/{id}) or SandboxListItem (`full: false`, without `env`, ...). */
  private dto(sb: Sandbox, full = true): object {
    return {
      id: sb.id,
      organizationId: this.organizationId,
      name: sb.name,
      ...(sb.snapshot ? { snapshot: sb.snapshot } : {}),
      user: sb.user,
      ...(full ? { env: sb.env, networkBlockAll: sb.networkBlockAll, volumes: [], kvm: false } : {}),
      labels: sb.labels,
      public: false,
      target: "local",
      cpu: sb.cpu,
      gpu: 0,
      memory: sb.memory,
      disk: sb.disk,
      state: sb.state,
      desiredState: ["stopping", "stopped"].includes(sb.state)
        ? "stopped"
        : sb.state === "destroyed"
          ? "destroyed"
          : "started",
      ...(sb.errorReason ? { errorReason: sb.errorReason } : {}),
      recoverable: false,
      backupState: "None",
      autoStopInterval: sb.autoStopInterval,
      autoArchiveInterval: sb.autoArchiveInterval,
      autoDeleteInterval: sb.autoDeleteInterval,
      ...(full && sb.buildInfo
        ? {
            buildInfo: {
              ...sb.buildInfo,
              createdAt: sb.createdAt.toISOString(),
              updatedAt: sb.updatedAt.toISOString(),
              snapshotRef: sb.image,
            },
          }
        : {}),
      createdAt: sb.createdAt.toISOString(),
      updatedAt: sb.updatedAt.toISOString(),
      lastActivityAt: sb.lastActivityAt.toISOString(),
      daemonVersion: "daytona-double",
      toolboxProxyUrl: `${this.url}/toolbox`,
    };
  }
}
