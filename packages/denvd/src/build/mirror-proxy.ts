import {
  createServer,
  request as httpRequest,
  type IncomingMessage,
  type Server,
  type ServerResponse,
} from "node:http";
import { connect, type Socket } from "node:net";

/**
 * The only way out of a build of an rl-environment: an HTTP proxy of denvd's own, on the build
 * network's gateway, that forwards to the package mirrors this host is configured for and to
 * nothing else. Plain HTTP requests (apt's `http://deb.debian.org/...`) are forwarded; HTTPS
 * goes through CONNECT to an allowed host on port 443. Every request is recorded (evidence).
 */

export interface ProxyRequest {
  method: string;
  host: string;
  /** Path of a plain HTTP request; "" for CONNECT. */
  path: string;
  /** The answer: the mirror's status, 403 when refused, 502 when the mirror could not be reached. */
  status: number;
  bytes: number;
}

/** A mirror is a host name (any port 80/443) as it appears in the host's package sources. */
export type MirrorList = readonly string[];

export class MirrorProxy {
  readonly requests: ProxyRequest[] = [];
  private readonly sockets = new Set<Socket>();

  private constructor(
    private readonly server: Server,
    readonly address: string,
    readonly port: number,
    readonly mirrors: MirrorList,
  ) {}

  /** Listens on `address` (the network's gateway), on `port` (default: a free one). */
  static async start(address: string, mirrors: MirrorList, listenPort = 0): Promise<MirrorProxy> {
    const server = createServer();
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(listenPort, address, () => resolve());
    });
    const port = (server.address() as { port: number }).port;
    const proxy = new MirrorProxy(server, address, port, mirrors);
    server.on("request", (req, res) => proxy.forward(req, res));
    server.on("connect", (req: IncomingMessage, sock: Socket, head: Buffer) => proxy.tunnel(req, sock, head));
    server.on("connection", (sock: Socket) => {
      proxy.sockets.add(sock);
      sock.on("close", () => proxy.sockets.delete(sock));
    });
    return proxy;
  }

  /** The proxy URL builds get as http_proxy / https_proxy. */
  get url(): string {
    return `http://${this.address}:${this.port}`;
  }

  async close(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private allowed(host: string): boolean {
    return this.mirrors.includes(host.toLowerCase());
  }

  private forward(req: IncomingMessage, res: ServerResponse): void {
    let target: URL;
    try {
      target = new URL(req.url ?? "");
    } catch {
      this.refuse(res, { method: req.method ?? "", host: "", path: req.url ?? "" }, 400);
      return;
    }
    const entry = { method: req.method ?? "GET", host: target.hostname, path: target.pathname };
    if (target.protocol !== "http:" || !this.allowed(target.hostname) || !["", "80"].includes(target.port)) {
      this.refuse(res, entry, 403);
      return;
    }
    const headers: Record<string, string | string[] | undefined> = { ...req.headers, host: target.host };
    delete headers["proxy-connection"];
    const upstream = httpRequest(
      {
        host: target.hostname,
        port: 80,
        method: req.method,
        path: `${target.pathname}${target.search}`,
        headers,
      },
      (up) => {
        let bytes = 0;
        up.on("data", (b: Buffer) => {
          bytes += b.length;
        });
        up.on("end", () => this.requests.push({ ...entry, status: up.statusCode ?? 0, bytes }));
        res.writeHead(up.statusCode ?? 502, up.headers);
        up.pipe(res);
      },
    );
    upstream.on("error", () => this.refuse(res, entry, 502));
    req.pipe(upstream);
  }

  private tunnel(req: IncomingMessage, sock: Socket, head: Buffer): void {
    const [host = "", port = "443"] = (req.url ?? "").split(":");
    const entry = { method: "CONNECT", host, path: "" };
    if (!this.allowed(host) || port !== "443") {
      this.requests.push({ ...entry, status: 403, bytes: 0 });
      sock.end("HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n");
      return;
    }
    let bytes = 0;
    const upstream = connect(443, host, () => {
      sock.write("HTTP/1.1 200 Connection Established\r\n\r\n");
      if (head.length > 0) upstream.write(head);
      upstream.pipe(sock);
      sock.pipe(upstream);
    });
    upstream.on("data", (b: Buffer) => {
      bytes += b.length;
    });
    upstream.on("close", () => this.requests.push({ ...entry, status: 200, bytes }));
    upstream.on("error", () => sock.destroy());
    sock.on("error", () => upstream.destroy());
  }

  private refuse(res: ServerResponse, entry: Omit<ProxyRequest, "status" | "bytes">, status: number): void {
    this.requests.push({ ...entry, status, bytes: 0 });
    if (!res.headersSent) res.writeHead(status, { "content-type": "text/plain" });
    res.end(
      status === 403 ? "denv: builds reach only the package mirrors this host is configured for\n" : "",
    );
  }
}
