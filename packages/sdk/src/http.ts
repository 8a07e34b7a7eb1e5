import { DenvApiError, DenvUnreachableError, errorFromBody } from "./errors.js";

/**
 * What the client needs of a zod schema from @denv/spec. Structural, so that the SDK does not
 * import zod itself (it comes with @denv/spec).
 */
export interface Schema<T> {
  safeParse(
    value: unknown,
  ):
    | { success: true; data: T }
    | { success: false; error: { issues: ReadonlyArray<{ path: PropertyKey[]; message: string }> } };
}

export type Query = Record<string, string | number | boolean | undefined>;

export interface RequestInit {
  query?: Query;
  /** Sent as JSON. */
  json?: unknown;
  /** Sent as is (a tar stream, bytes). */
  body?: AsyncIterable<Uint8Array> | Uint8Array;
  contentType?: string;
  accept?: string;
  headers?: Record<string, string>;
  signal?: AbortSignal;
}

/**
 * The HTTP side of the client: URLs, the bearer token, and the mapping of every failure to a
 * DenvApiError. The only place that calls fetch.
 */
export class Transport {
  /** The control plane's base URL without a trailing slash. */
  readonly url: string;
  readonly token: string | undefined;
  readonly #fetch: typeof fetch;

  constructor(url: string, token: string | undefined, fetchImpl: typeof fetch | undefined) {
    let parsed: URL;
    try {
      parsed = new URL(url);
    } catch {
      throw new DenvApiError(0, "invalid_request", `'${url}' is not a URL; give the control plane's URL`);
    }
    if (parsed.protocol !== "http:" && parsed.protocol !== "https:") {
      throw new DenvApiError(0, "invalid_request", `'${url}' is not an http(s) URL`);
    }
    this.url = url.replace(/\/+$/, "");
    this.token = token === "" ? undefined : token;
    this.#fetch = fetchImpl ?? fetch;
  }

  href(path: string, query: Query = {}): string {
    const params = new URLSearchParams();
    for (const [key, value] of Object.entries(query)) {
      if (value !== undefined) params.set(key, String(value));
    }
    const qs = params.toString();
    return `${this.url}${path}${qs === "" ? "" : `?${qs}`}`;
  }

  /** The WebSocket URL of a route (ws: for http:, wss: for https:). */
  wsHref(path: string, query: Query = {}): string {
    return this.href(path, query).replace(/^http/, "ws");
  }

  authHeaders(): Record<string, string> {
    return this.token === undefined ? {} : { authorization: `Bearer ${this.token}` };
  }

  /** Sends a request; resolves with a 2xx response, throws DenvApiError otherwise. */
  async send(method: string, path: string, init: RequestInit = {}): Promise<Response> {
    const headers: Record<string, string> = {
      ...init.headers,
      ...this.authHeaders(),
      accept: init.accept ?? "application/json",
    };
    let body: string | AsyncIterable<Uint8Array> | Uint8Array | undefined;
    if (init.json !== undefined) {
      headers["content-type"] = "application/json";
      body = JSON.stringify(init.json);
    } else if (init.body !== undefined) {
      headers["content-type"] = init.contentType ?? "application/octet-stream";
      body = init.body;
    }
    let res: Response;
    try {
      res = await this.#fetch(this.href(path, init.query), {
        method,
        headers,
        body,
        // A streamed request body needs half duplex in Node's fetch.
        ...(body !== undefined && typeof body !== "string" && !(body instanceof Uint8Array)
          ? { duplex: "half" as const }
          : {}),
        signal: init.signal,
      });
    } catch (err) {
      if (init.signal?.aborted === true) throw err;
      throw new DenvUnreachableError(this.url, err);
    }
    if (res.ok) return res;
    const text = await res.text().catch(() => "");
    throw errorFromBody(res.status, res.statusText, text, `${method} ${path}`);
  }

  /** Sends a request and parses its JSON answer with `schema`. */
  async json<T>(method: string, path: string, schema: Schema<T>, init: RequestInit = {}): Promise<T> {
    const res = await this.send(method, path, init);
    return parseBody(schema, await readText(res, this.url), `${method} ${path}`);
  }

  /** Sends a request whose answer has no body we need (204). */
  async empty(method: string, path: string, init: RequestInit = {}): Promise<void> {
    const res = await this.send(method, path, init);
    await res.arrayBuffer().catch(() => undefined);
  }
}

async function readText(res: Response, url: string): Promise<string> {
  try {
    return await res.text();
  } catch (err) {
    throw new DenvUnreachableError(url, err);
  }
}

/** Parses an answer with the schema its type comes from; a mismatch is the server's fault. */
export function parseBody<T>(schema: Schema<T>, text: string, what: string): T {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    throw new DenvApiError(0, "invalid_response", `${what} answered with a body that is not JSON`);
  }
  return parseValue(schema, json, what);
}

export function parseValue<T>(schema: Schema<T>, value: unknown, what: string): T {
  const parsed = schema.safeParse(value);
  if (parsed.success) return parsed.data;
  const issue = parsed.error.issues[0];
  const where =
    issue === undefined || issue.path.length === 0 ? "" : ` at ${issue.path.map(String).join(".")}`;
  throw new DenvApiError(
    0,
    "invalid_response",
    `${what} answered with an unexpected body${where}: ${issue?.message ?? "invalid"}; are the CLI and the control plane the same version?`,
  );
}
