import { randomBytes } from "node:crypto";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { DoubleDocker } from "../../testing/double-docker.js";
import { ApiError } from "./prime-api-error.js";
import { Checkpoints } from "./prime-checkpoints.js";
import { Gateway } from "./prime-gateway.js";
import { Images } from "./prime-images.js";
import { Networks } from "./prime-networks.js";
import { Sandboxes } from "./prime-sandboxes.js";

/**
 * Prime Intellect's sandbox service (https://docs.primeintellect.ai/api-reference/sandboxes) on
 * 127.0.0.1 for tests, as the official `prime-sandboxes` SDK (0.5.1) calls it with
 * `PRIME_API_BASE_URL=<url>`: the API under /api/v1 (Bearer API key; errors as FastAPI's
 * `{"detail"}`) and the gateway on a second listener (see prime-gateway.ts). Sandboxes are
 * containers of the images named in `images` (docker_image → local image; never pulled) or of
 * images built through the image API (prime-images.ts; the context is PUT to
 * /uploads/builds/{id} on this listener, as to Prime's presigned URL). One created with an empty
 * `network_allowlist` (or set so by PUT egress-policy) has no network (Docker's `none`) and
 * reaches nothing. A private network (prime-networks.ts) is a Docker network of its own that only
 * its members reach, each other at `<sandbox-id>.sandbox.internal`: the double enforces who is a
 * member, not the network's rules (tags and ports), which it stores and answers. Everything it
 * makes in Docker carries LABELS plus `ai.denv.prime.server=<id>`; close() removes all of it.
 *
 * API routes: POST/GET /sandbox, GET/DELETE /sandbox/{id}, POST /sandbox/status:batchGet,
 * POST /sandbox/{id}/auth, GET /sandbox/{id}/error-context, GET/PUT /sandbox/{id}/egress-policy,
 * POST/GET/DELETE /sandbox/{id}/checkpoints, GET/DELETE /sandbox/checkpoints/{id},
 * POST /sandbox/checkpoints:batchGet, POST /sandbox/networks (201), GET/DELETE
 * /sandbox/networks/{id}, PUT /sandbox/networks/{id}/rules, PUT/DELETE
 * /sandbox/networks/{id}/members/{sandbox_id}, POST /images/build (Dockerfile builds;
 * `source_image` transfers are refused), POST /images/build/{id}/start, GET /images/build/{id},
 * GET /images. POST /sandbox takes `checkpoint_id` instead of `docker_image` to restore a durable
 * checkpoint. Not served (404): SSH sessions, logs, bulk delete, background-job batches,
 * volumes, image updates and deletes; on the gateway, the Connect, List, Update and StreamInput
 * RPCs and PTYs. Sandboxes live until deleted (no timeout_minutes).
 */
const LABELS = { "ai.denv.managed": "true", "ai.denv.test": "prime-server" } as const;

export interface PrimeServerOptions {
  apiKey: string;
  /** `docker_image` names → images already on the local engine (besides those the image API builds). */
  images: Record<string, string>;
  /** The network image builds' RUN steps get (default "none": they reach nothing). */
  buildNetwork?: "none" | "default";
}

type Body = Record<string, unknown>;

/** An answer sent with 201 Created rather than 200. */
class Created {
  constructor(readonly body: object) {}
}

export class PrimeServer {
  readonly id = randomBytes(4).toString("hex");
  readonly docker: DoubleDocker;
  readonly sandboxes: Sandboxes;
  readonly checkpoints: Checkpoints;
  readonly gateway: Gateway;
  readonly images: Images;
  readonly networks: Networks;
  /** The user id the API key stands for: personal images are `<it>/<name>:<tag>`. */
  readonly userId: string;
  /** Every API request served, as "METHOD /path" (no query), in order. */
  readonly requests: string[] = [];
  /** The SDK's base URL (PRIME_API_BASE_URL): the API is under its /api/v1. */
  url = "";
  /** The networks sandboxes with and without egress run on. */
  private readonly egressNetworks = { open: "", internal: "" };
  private readonly servers: Server[] = [];

  constructor(private readonly options: PrimeServerOptions) {
    this.docker = new DoubleDocker("Prime", { ...LABELS, "ai.denv.prime.server": this.id });
    this.userId = `user${this.id}`;
    this.images = new Images({
      docker: this.docker,
      serverId: this.id,
      userId: this.userId,
      uploadUrl: (build, token) => `${this.url}/uploads/builds/${build}?${new URLSearchParams({ token })}`,
      buildNetwork: options.buildNetwork ?? "none",
    });
    this.sandboxes = new Sandboxes({
      docker: this.docker,
      serverId: this.id,
      networks: this.egressNetworks,
      localImage: (ref) =>
        Object.hasOwn(options.images, ref) ? options.images[ref] : this.images.local(ref),
      restorable: (id) => this.checkpoints.restorable(id),
      onPrivateNetwork: (id) => this.networks.isMember(id),
    });
    this.checkpoints = new Checkpoints(this.docker, this.sandboxes, `denv-prime-${this.id}`);
    this.gateway = new Gateway(this.docker, this.sandboxes);
    this.networks = new Networks({ docker: this.docker, serverId: this.id, sandboxes: this.sandboxes });
  }

  get labels(): Record<string, string> {
    return this.docker.labels;
  }

  async start(): Promise<this> {
    this.egressNetworks.open = await this.docker.createNetwork(`denv-prime-${this.id}-open`, false);
    // Not an `internal` network: a container on one still reaches the host's own addresses (the
    // engine filters forwarding only), where an egress canary listens; "none" reaches nothing.
    this.egressNetworks.internal = "none";
    this.url = await this.listen((req, res, body) => this.handle(req, res, body));
    this.gateway.url = await this.listen((req, res, body) => this.gateway.handle(req, res, body));
    return this;
  }

  /** Stops listening, waits for starts and commits under way, removes every labelled object. */
  async close(): Promise<void> {
    for (const s of this.servers) {
      s.closeAllConnections();
      await new Promise<void>((r) => s.close(() => r()));
    }
    await this.sandboxes.settle();
    await this.checkpoints.settle();
    await this.images.settle();
    await this.networks.settle();
    await this.docker.removeAll();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  private async listen(
    handle: (req: IncomingMessage, res: ServerResponse, body: Buffer) => Promise<void>,
  ): Promise<string> {
    const server = createServer((req, res) => {
      void (async () => {
        const chunks: Buffer[] = [];
        for await (const c of req) chunks.push(c as Buffer);
        await handle(req, res, Buffer.concat(chunks));
      })().catch((e: unknown) => {
        if (!res.headersSent) res.writeHead(500, { "content-type": "application/json" });
        res.end(JSON.stringify({ detail: String(e) }));
      });
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    this.servers.push(server);
    return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  }

  private async handle(req: IncomingMessage, res: ServerResponse, raw: Buffer): Promise<void> {
    const url = new URL(req.url ?? "/", "http://x");
    const method = req.method ?? "GET";
    this.requests.push(`${method} ${url.pathname}`);
    try {
      const upload = /^\/uploads\/builds\/([^/]+)$/.exec(url.pathname);
      if (upload && method === "PUT") {
        // A presigned URL: its token is the credential, the body the raw context.
        this.images.upload(upload[1] ?? "", url.searchParams.get("token"), req.headers["content-type"], raw);
        res.writeHead(200);
        return void res.end();
      }
      if (req.headers.authorization !== `Bearer ${this.options.apiKey}`)
        throw new ApiError(401, "Invalid or missing API key");
      let body: Body = {};
      if (raw.length > 0) {
        try {
          body = JSON.parse(raw.toString()) as Body;
        } catch {
          throw new ApiError(422, "the body is not JSON");
        }
      }
      const images = url.pathname.replace(/^\/api\/v1\/images/, "");
      const path = url.pathname.replace(/^\/api\/v1\/sandbox/, "");
      let reply: object | undefined;
      if (images !== url.pathname) reply = this.imageRoute(method, images, url.searchParams, body);
      else if (path !== url.pathname) reply = await this.route(method, path, url.searchParams, body);
      else throw new ApiError(404, "Not Found");
      if (reply === undefined) {
        res.writeHead(204);
        return void res.end();
      }
      res.writeHead(reply instanceof Created ? 201 : 200, { "content-type": "application/json" });
      res.end(JSON.stringify(reply instanceof Created ? reply.body : reply));
    } catch (e) {
      if (!(e instanceof ApiError)) throw e;
      res.writeHead(e.status, { "content-type": "application/json" });
      res.end(JSON.stringify({ detail: e.message }));
    }
  }

  /** One call of the image API (the part of the path after /images). */
  private imageRoute(method: string, path: string, q: URLSearchParams, body: Body): object {
    const build = /^\/build\/([^/]+)(\/start)?$/.exec(path);
    const id = decodeURIComponent(build?.[1] ?? "");
    if (method === "GET" && (path === "" || path === "/")) return this.images.list(q);
    if (method === "POST" && path === "/build") return this.images.initiate(body);
    if (method === "POST" && build?.[2]) return this.images.start(id, body);
    if (method === "GET" && build && !build[2]) return this.images.status(id);
    throw new ApiError(404, "Not Found");
  }

  /** One API call: its answer, or undefined for 204 No Content. */
  private async route(
    method: string,
    path: string,
    q: URLSearchParams,
    body: Body,
  ): Promise<object | undefined> {
    const { sandboxes, checkpoints } = this;
    const networks = /^\/networks(?=\/|$)/;
    if (networks.test(path)) return this.networkRoute(method, path.replace(networks, ""), body);
    const route = `${method} ${path.replace(/^\/[^/]+/, (seg) => (seg.includes(":") ? seg : "/{id}"))}`;
    const id = decodeURIComponent(path.split("/")[1] ?? "");
    const sub = decodeURIComponent(path.split("/")[2] ?? "");
    if (route === "POST " || route === "POST /") return sandboxes.json(sandboxes.create(body));
    if (route === "GET " || route === "GET /") return sandboxes.list(q);
    if (route === "POST /status:batchGet") return sandboxes.statuses(body.sandbox_ids);
    if (route === "POST /checkpoints:batchGet") return checkpoints.batch(body.checkpoint_ids);
    if (id === "checkpoints" && sub) {
      if (method === "GET") return checkpoints.json(checkpoints.get(sub));
      if (method === "DELETE") return void (await checkpoints.delete(sub));
    }
    switch (route) {
      case "GET /{id}":
        return sandboxes.json(sandboxes.get(id));
      case "DELETE /{id}":
        return this.deleteSandbox(id);
      case "POST /{id}/auth":
        return this.gateway.auth(id);
      case "GET /{id}/error-context":
        return sandboxes.errorContext(id);
      case "GET /{id}/egress-policy":
        return sandboxes.egress(id);
      case "PUT /{id}/egress-policy":
        return sandboxes.setEgress(id, body);
      case "POST /{id}/checkpoints":
        return checkpoints.json(checkpoints.create(id));
      case "GET /{id}/checkpoints":
        return checkpoints.list(id, q.get("checkpoint_id"));
      case "DELETE /{id}/checkpoints":
        return checkpoints.deleteOfSandbox(id);
    }
    throw new ApiError(404, "Not Found");
  }

  /** DELETE /sandbox/{id}: its container goes, and with it its place in private networks. */
  private async deleteSandbox(id: string): Promise<object> {
    const reply = await this.sandboxes.delete(id);
    this.networks.forget(id);
    return reply;
  }

  /** One call of the private networks' API (the part of the path after /sandbox/networks). */
  private async networkRoute(method: string, path: string, body: Body): Promise<object | undefined> {
    const { networks } = this;
    const [, id = "", , sandbox = ""] = path.split("/").map(decodeURIComponent);
    const route = `${method} ${path.replace(/^\/[^/]+/, "/{id}").replace(/\/members\/[^/]+$/, "/members/{sandbox}")}`;
    switch (route) {
      case "POST ":
      case "POST /":
        return new Created(networks.json(await networks.create(body)));
      case "GET /{id}":
        return networks.json(networks.get(id));
      case "DELETE /{id}":
        return void (await networks.delete(id));
      case "PUT /{id}/rules":
        return networks.setRules(id, body);
      case "PUT /{id}/members/{sandbox}":
        return networks.putMember(id, sandbox, body);
      case "DELETE /{id}/members/{sandbox}":
        return void (await networks.removeMember(id, sandbox));
    }
    throw new ApiError(404, "Not Found");
  }
}
