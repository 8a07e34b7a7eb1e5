import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";

/**
 * A Hetzner Cloud API on 127.0.0.1 for tests: the routes the hetzner driver uses, as
 * https://docs.hetzner.cloud/reference/cloud documents them: POST /v1/servers (name, server_type,
 * image, location required; labels; user_data up to 32 KiB), GET /v1/servers (label_selector with
 * `k=v`/`k==v` terms joined by commas, page/per_page, meta.pagination), GET and DELETE
 * /v1/servers/{id}; Bearer tokens; errors as {"error": {"code", "message"}}.
 */
export interface FakeServer {
  id: number;
  name: string;
  status: string;
  server_type: {
    name: string;
    prices: Array<{ location: string; price_hourly: { net: string; gross: string } }>;
  };
  image: { name: string };
  datacenter: { location: { name: string } };
  labels: Record<string, string>;
  user_data: string;
  created: string;
}

export class HetznerTestServer {
  readonly servers = new Map<number, FakeServer>();
  readonly requests: string[] = [];
  /** Requests' Authorization headers, to show which token each call carried. */
  readonly authorizations: string[] = [];
  /** The next POST /v1/servers fails with this error once (e.g. resource_limit_exceeded). */
  failNextCreate?: { status: number; code: string; message: string };
  private nextId = 1000;
  private server?: Server;
  url = "";

  constructor(private readonly token: string) {}

  async start(): Promise<this> {
    this.server = createServer((req, res) => {
      void this.handle(req, res);
    });
    await new Promise<void>((r) => this.server?.listen(0, "127.0.0.1", r));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}/v1`;
    return this;
  }

  async close(): Promise<void> {
    await new Promise<void>((r) => this.server?.close(() => r()));
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const send = (status: number, body: unknown) => {
      res.writeHead(status, { "content-type": "application/json" });
      res.end(JSON.stringify(body));
    };
    const fail = (status: number, code: string, message: string) =>
      send(status, { error: { code, message } });
    const url = new URL(req.url ?? "/", "http://x");
    this.requests.push(`${req.method} ${url.pathname}${url.search}`);
    this.authorizations.push(req.headers.authorization ?? "");
    if (req.headers.authorization !== `Bearer ${this.token}`)
      return fail(401, "unauthorized", "unable to authenticate");
    let raw = "";
    for await (const chunk of req) raw += chunk;

    if (req.method === "POST" && url.pathname === "/v1/servers") {
      if (this.failNextCreate) {
        const f = this.failNextCreate;
        this.failNextCreate = undefined;
        return fail(f.status, f.code, f.message);
      }
      let b: Record<string, unknown>;
      try {
        b = JSON.parse(raw) as Record<string, unknown>;
      } catch {
        return fail(400, "json_error", "invalid JSON");
      }
      for (const k of ["name", "server_type", "image"] as const) {
        if (typeof b[k] !== "string" || b[k] === "")
          return fail(422, "invalid_input", `invalid input in field '${k}'`);
      }
      if (typeof b.user_data === "string" && Buffer.byteLength(b.user_data) > 32 * 1024) {
        return fail(422, "invalid_input", "user_data is larger than 32 KiB");
      }
      if ([...this.servers.values()].some((s) => s.name === b.name))
        return fail(409, "uniqueness_error", "server name is already used");
      const location = typeof b.location === "string" ? b.location : "fsn1";
      const s: FakeServer = {
        id: this.nextId++,
        name: b.name as string,
        status: "initializing",
        server_type: {
          name: b.server_type as string,
          prices: [{ location, price_hourly: { net: "0.0050000000", gross: "0.0059500000" } }],
        },
        image: { name: b.image as string },
        datacenter: { location: { name: location } },
        labels: (b.labels as Record<string, string>) ?? {},
        user_data: (b.user_data as string) ?? "",
        created: new Date().toISOString(),
      };
      this.servers.set(s.id, s);
      return send(201, {
        server: s,
        action: { id: s.id * 10, command: "create_server", status: "running" },
        next_actions: [],
        root_password: null,
      });
    }
    if (req.method === "GET" && url.pathname === "/v1/servers") {
      const terms = (url.searchParams.get("label_selector") ?? "")
        .split(",")
        .filter((t) => t !== "")
        .map((t) => t.split(/==?/) as [string, string]);
      const all = [...this.servers.values()].filter((s) => terms.every(([k, v]) => s.labels[k] === v));
      const perPage = Math.min(50, Number(url.searchParams.get("per_page") ?? 25));
      const page = Number(url.searchParams.get("page") ?? 1);
      const last = Math.max(1, Math.ceil(all.length / perPage));
      return send(200, {
        servers: all.slice((page - 1) * perPage, page * perPage),
        meta: {
          pagination: {
            page,
            per_page: perPage,
            previous_page: page > 1 ? page - 1 : null,
            next_page: page < last ? page + 1 : null,
            last_page: last,
            total_entries: all.length,
          },
        },
      });
    }
    const m = /^\/v1\/servers\/(\d+)$/.exec(url.pathname);
    if (m) {
      const s = this.servers.get(Number(m[1]));
      if (!s) return fail(404, "not_found", "server not found");
      if (req.method === "GET") return send(200, { server: s });
      if (req.method === "DELETE") {
        this.servers.delete(s.id);
        return send(200, { action: { id: s.id * 10 + 1, command: "delete_server", status: "running" } });
      }
    }
    fail(404, "not_found", "route not found");
  }
}
