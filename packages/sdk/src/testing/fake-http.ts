import type { IncomingMessage, ServerResponse } from "node:http";
import { gunzipSync } from "node:zlib";
import { DenvError } from "@denv/spec";
import type { FakeState, TokenInfo } from "./fake-state.js";

/** HTTP plumbing of the fake control plane: auth, bodies, error mapping (as routes.md says). */

export interface Ctx {
  req: IncomingMessage;
  res: ServerResponse;
  url: URL;
  params: string[];
  token: TokenInfo;
  state: FakeState;
}

export type Handler = (ctx: Ctx) => Promise<void> | void;

export interface Route {
  method: string;
  pattern: RegExp;
  auth: "none" | "token" | "admin";
  handler: Handler;
}

export function send(res: ServerResponse, status: number, body?: unknown): void {
  if (body === undefined) {
    res.writeHead(status).end();
    return;
  }
  res.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify(body));
}

/** The one mapping of errors to HTTP: DenvError's status and `{"error": {...}}`. */
export function sendError(res: ServerResponse, err: unknown): void {
  const e = err instanceof DenvError ? err : new DenvError("internal", (err as Error).message);
  if (res.headersSent) {
    res.destroy();
    return;
  }
  send(res, e.status, { error: e.details.length > 0 ? e.toJSON() : { code: e.code, message: e.message } });
}

export async function readBody(req: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

export async function readJson(req: IncomingMessage): Promise<Record<string, unknown>> {
  const body = await readBody(req);
  if (body.length === 0) return {};
  try {
    const value: unknown = JSON.parse(body.toString("utf8"));
    if (typeof value === "object" && value !== null && !Array.isArray(value))
      return value as Record<string, unknown>;
  } catch {
    // fall through
  }
  throw new DenvError("invalid_request", "the request body is not a JSON object");
}

/** A tar body, gunzipped when it starts with the gzip magic (routes.md: "optional gzip"). */
export async function readTar(req: IncomingMessage): Promise<Buffer> {
  const body = await readBody(req);
  return body[0] === 0x1f && body[1] === 0x8b ? gunzipSync(body) : body;
}

export function authenticate(state: FakeState, req: IncomingMessage): TokenInfo {
  const header = req.headers.authorization ?? "";
  const token = /^Bearer (.+)$/.exec(header)?.[1];
  const info = token === undefined ? undefined : state.tokens.get(token);
  if (info === undefined) {
    throw new DenvError("unauthorized", "a valid API token is required (Authorization: Bearer <token>)");
  }
  return info;
}

export function requireScope(token: TokenInfo, project: string): void {
  if (token.project !== undefined && token.project !== project) {
    throw new DenvError("forbidden", `this token is limited to project '${token.project}'`);
  }
}

export function requireAdmin(token: TokenInfo): void {
  if (token.role !== "admin") throw new DenvError("forbidden", "this route needs an admin token");
}

/** A route of the table: `:name` segments of the pattern become `ctx.params`, in order. */
export function route(method: string, pattern: string, auth: Route["auth"], handler: Handler): Route {
  return { method, pattern: new RegExp(`^${pattern.replace(/:[a-z]+/g, "([^/]+)")}$`), auth, handler };
}

/** A schema's parse, failing as the control plane does: 400 naming the field. */
export function parse<T>(
  schema: {
    safeParse(
      v: unknown,
    ):
      | { success: true; data: T }
      | { success: false; error: { issues: { message: string; path: PropertyKey[] }[] } };
  },
  value: unknown,
): T {
  const r = schema.safeParse(value);
  if (r.success) return r.data;
  const issue = r.error.issues[0];
  throw new DenvError("invalid_request", `${issue?.path.join(".") ?? ""}: ${issue?.message ?? "invalid"}`);
}
