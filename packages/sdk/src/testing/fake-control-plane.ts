import { mkdtempSync, rmSync } from "node:fs";
import { createServer, type IncomingMessage, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import os from "node:os";
import path from "node:path";
import type { Duplex } from "node:stream";
import { DenvError, ExecStreamClientFrame } from "@denv/spec";
import { type WebSocket, WebSocketServer } from "ws";
import { checkExec, runFake } from "./fake-exec.js";
import { authenticate, type Ctx, requireAdmin, requireScope, sendError } from "./fake-http.js";
import { routes } from "./fake-routes.js";
import { FakeState } from "./fake-state.js";

/**
 * A small control plane for the SDK and CLI tests: the routes of contracts/routes.md with their
 * status codes, error bodies, SSE log and WebSocket exec and connect routes, backed by memory
 * and a temporary folder (the services' file systems). Not a mock of the client: it is written
 * from the contract, so a client that passes against it speaks the contract.
 *
 * Seeded with project `quickstart` (rl-environment) running `quickstart/alpha` at quickstart@v1,
 * an admin token and a member token scoped to `quickstart`.
 */
export interface FakeControlPlane {
  url: string;
  adminToken: string;
  memberToken: string;
  state: FakeState;
  /** The folder standing for the services' file systems: `<root>/<project>/<env>/<service>/...`. */
  filesRoot: string;
  /** Every request seen, as "METHOD /path?query". */
  requests: string[];
  close(): Promise<void>;
}

const ADMIN_TOKEN = "admin-secret";
const MEMBER_TOKEN = "member-secret";

export interface FakeOptions {
  /** The delay of each phase of a deployment (default 5 ms). */
  phaseDelayMs?: number;
  /** Number SSE events and honour Last-Event-ID, as the control plane does (default true). */
  sseIds?: boolean;
  /** Where to listen (default 127.0.0.1 and a free port). */
  host?: string;
  port?: number;
}

export async function startFakeControlPlane(options: FakeOptions = {}): Promise<FakeControlPlane> {
  const state = new FakeState(options.phaseDelayMs ?? 5);
  state.sseIds = options.sseIds ?? true;
  state.tokens.set(ADMIN_TOKEN, { id: "tok_admin", name: "admin", role: "admin" });
  state.tokens.set(MEMBER_TOKEN, { id: "tok_member", name: "ci", role: "member", project: "quickstart" });
  state.projects.set("quickstart", {
    name: "quickstart",
    kind: "rl-environment",
    compose_path: "compose.yaml",
    created_at: new Date().toISOString(),
  });
  const alpha = state.newEnvironment("quickstart", "alpha", undefined);
  alpha.status = "running";
  alpha.version = state.newVersion(alpha).id;

  const filesRoot = mkdtempSync(path.join(os.tmpdir(), "denv-fake-files-"));
  const table = routes(state, filesRoot);
  const requests: string[] = [];

  const server: Server = createServer((req, res) => {
    const url = new URL(req.url ?? "/", "http://fake");
    requests.push(`${req.method} ${url.pathname}${url.search}`);
    void (async () => {
      try {
        let matched = false;
        for (const route of table) {
          const m = route.pattern.exec(url.pathname);
          if (m === null) continue;
          matched = true;
          if (route.method !== req.method) continue;
          const token =
            route.auth === "none" ? { id: "", name: "", role: "member" as const } : authenticate(state, req);
          if (route.auth === "admin") requireAdmin(token);
          const params = m.slice(1).map(decodeURIComponent);
          const ctx: Ctx = { req, res, url, params, token, state };
          await route.handler(ctx);
          return;
        }
        throw matched
          ? new DenvError("invalid_request", `${req.method} is not allowed on ${url.pathname}`)
          : new DenvError("not_found", `no route ${req.method} ${url.pathname}`);
      } catch (err) {
        sendError(res, err);
      }
    })();
  });

  const wss = new WebSocketServer({ noServer: true });
  server.on("upgrade", (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    const url = new URL(req.url ?? "/", "http://fake");
    requests.push(`WS ${url.pathname}${url.search}`);
    // The client may reset the socket once it has read a refusal: not an error of this server.
    socket.on("error", () => undefined);
    try {
      const m = /^\/v1\/environments\/([^/]+)\/([^/]+)\/(exec\/stream|connect)$/.exec(url.pathname);
      if (m === null) throw new DenvError("not_found", `no route GET ${url.pathname}`);
      // As the control plane: auth and the query are checked before the upgrade, the
      // environment after it (an error frame for exec, a 1011 close for a tunnel).
      const token = authenticate(state, req);
      requireScope(token, decodeURIComponent(m[1] ?? ""));
      const envId = `${decodeURIComponent(m[1] ?? "")}/${decodeURIComponent(m[2] ?? "")}`;
      if (m[3] === "connect") {
        const port = Number(url.searchParams.get("port"));
        if (!Number.isInteger(port) || port < 1 || port > 65535) {
          throw new DenvError("invalid_request", "port: expected a port number");
        }
        wss.handleUpgrade(req, socket, head, (ws) =>
          tunnel(ws, state, envId, url.searchParams.get("service") ?? ""),
        );
      } else {
        wss.handleUpgrade(req, socket, head, (ws) => execSession(ws, state, envId));
      }
    } catch (err) {
      const e = err instanceof DenvError ? err : new DenvError("internal", String(err));
      const body = JSON.stringify({ error: { code: e.code, message: e.message } });
      socket.end(
        `HTTP/1.1 ${e.status} Refused\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`,
      );
    }
  });

  const host = options.host ?? "127.0.0.1";
  await new Promise<void>((resolve) => server.listen(options.port ?? 0, host, resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://${host}:${port}`,
    adminToken: ADMIN_TOKEN,
    memberToken: MEMBER_TOKEN,
    state,
    filesRoot,
    requests,
    async close() {
      for (const client of wss.clients) client.terminate();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      rmSync(filesRoot, { recursive: true, force: true });
    },
  };
}

/** The connect route's far end: a service that echoes every byte back. */
function tunnel(ws: WebSocket, state: FakeState, envId: string, service: string): void {
  try {
    const env = state.environment(envId);
    if (!env.services.some((s) => s.name === service)) {
      throw new DenvError("not_found", `environment ${env.id} has no service '${service}'`);
    }
  } catch (err) {
    ws.close(1011, (err as Error).message.slice(0, 120));
    return;
  }
  ws.on("message", (data, isBinary) => {
    if (isBinary) ws.send(data, { binary: true });
  });
}

/** The exec stream route: `start`, `stdin`..., `stdin_end` in; `stdout`/`stderr`..., `exit` out. */
function execSession(ws: WebSocket, state: FakeState, envId: string): void {
  const queue: Buffer[] = [];
  let ended = false;
  let wake: (() => void) | undefined;
  async function* stdin(): AsyncGenerator<Buffer> {
    for (;;) {
      const next = queue.shift();
      if (next !== undefined) yield next;
      else if (ended) return;
      else await new Promise<void>((r) => (wake = r));
    }
  }
  const poke = () => {
    wake?.();
    wake = undefined;
  };
  ws.on("close", () => {
    ended = true;
    poke();
  });
  ws.on("message", (data) => {
    const parsed = ExecStreamClientFrame.safeParse(JSON.parse(String(data)));
    if (!parsed.success) {
      fail(ws, new DenvError("invalid_request", parsed.error.issues[0]?.message ?? "invalid frame"));
      return;
    }
    const frame = parsed.data;
    if (frame.type === "stdin") queue.push(Buffer.from(frame.data, "base64"));
    else if (frame.type === "stdin_end") ended = true;
    else {
      void (async () => {
        try {
          const env = state.environment(envId);
          checkExec(env, frame.exec, state.project(env.project).kind);
          const send = (type: "stdout" | "stderr", bytes: Buffer) =>
            ws.send(JSON.stringify({ type, data: bytes.toString("base64") }));
          const result = await runFake(env, frame.exec, stdin(), send);
          ws.send(JSON.stringify({ type: "exit", result }));
          ws.close(1000, "exit");
        } catch (err) {
          fail(ws, err);
        }
      })();
    }
    poke();
  });
}

/** As the control plane: an error frame, then a 1011 close with the message. */
function fail(ws: WebSocket, err: unknown): void {
  const e = err instanceof DenvError ? err : new DenvError("internal", String(err));
  ws.send(JSON.stringify({ type: "error", error: { code: e.code, message: e.message } }));
  ws.close(1011, e.message.slice(0, 120));
}
