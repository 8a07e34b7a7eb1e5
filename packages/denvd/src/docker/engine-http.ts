import { type IncomingMessage, request } from "node:http";
import { createRequire } from "node:module";
import type Docker from "dockerode";

/** dockerode on the engine's socket, loaded and connected at the first call that needs it. */
export type LazyDocker = () => Docker;

export function lazyDocker(socketPath: string): LazyDocker {
  let api: Docker | undefined;
  return () => {
    // Required, not imported: dockerode is CommonJS (see connection.ts on ws).
    api ??= new (createRequire(import.meta.url)("dockerode") as typeof Docker)({ socketPath });
    return api;
  };
}

/**
 * The Engine API's plain GETs, on the engine's socket without dockerode: the calls an idle
 * denvd makes (ping, gc's listings by label, the restart watch's event stream). dockerode
 * brings ssh2, gRPC and protobufjs (207 modules; an idle denvd held 11 MB less without them),
 * so it waits for the first call that needs it. Failures carry what dockerode's carry
 * (`statusCode`, the engine's JSON as `json`): engineError maps both alike.
 */
export class EngineHttp {
  constructor(private readonly socketPath: string) {}

  /** GET `path`: the engine's JSON answer (its text when it is not JSON, as for /_ping). */
  async get<T>(path: string, query: Record<string, unknown> = {}): Promise<T> {
    const res = await this.open(path, query);
    const body = await readAll(res);
    if (res.statusCode !== 200) throw engineHttpError(res.statusCode ?? 0, body);
    return (parseJson(body) ?? body) as T;
  }

  /** A GET whose answer streams (the event stream): the response, once the engine said 200. */
  async stream(path: string, query: Record<string, unknown> = {}): Promise<IncomingMessage> {
    const res = await this.open(path, query);
    if (res.statusCode !== 200) throw engineHttpError(res.statusCode ?? 0, await readAll(res));
    return res;
  }

  private open(path: string, query: Record<string, unknown>): Promise<IncomingMessage> {
    return new Promise((resolve, reject) => {
      const req = request({ socketPath: this.socketPath, method: "GET", path: path + queryString(query) });
      req.on("response", resolve);
      req.on("error", reject);
      req.end();
    });
  }
}

/** Query parameters as the engine (and docker-modem) spell them: objects such as `filters` as JSON. */
function queryString(query: Record<string, unknown>): string {
  const params = new URLSearchParams();
  for (const [k, v] of Object.entries(query)) {
    if (v === undefined) continue;
    params.set(k, v !== null && typeof v === "object" && !Array.isArray(v) ? JSON.stringify(v) : String(v));
  }
  const qs = params.toString();
  return qs ? `?${qs}` : "";
}

async function readAll(res: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of res) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString("utf8");
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return undefined;
  }
}

function engineHttpError(status: number, body: string): Error {
  const json = parseJson(body) as { message?: string } | undefined;
  return Object.assign(new Error(`(HTTP code ${status}) ${json?.message ?? body}`), {
    statusCode: status,
    json,
  });
}
