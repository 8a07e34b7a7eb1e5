import type { FastifyReply, FastifyRequest } from "fastify";
import type { WebSocket } from "ws";
import { z } from "zod";
import type { Principal } from "../services/access.js";

/**
 * The route table: every route is one of these objects. The same objects register the Fastify
 * routes and generate /v1/openapi.json, so the document cannot drift from the server.
 */

/** none: public; token: any API token; admin: an admin token; host: a host credential (the stream). */
export type Auth = "none" | "token" | "admin" | "host";

export interface ResponseSpec {
  status: number;
  description: string;
  /** JSON body schema (validated before sending); absent for 204 and non-JSON bodies. */
  schema?: z.ZodType;
  /** Default application/json. */
  contentType?: string;
}

export type AnyObject = z.ZodObject<z.ZodRawShape>;

export interface RouteContext<P extends AnyObject, Q extends AnyObject, B extends z.ZodType> {
  params: z.output<P>;
  query: z.output<Q>;
  /** The parsed JSON body (absent when the route takes none, or got a binary body: see `raw`). */
  body: z.output<B>;
  raw: FastifyRequest["body"];
  /** The body's bytes as they arrived (routes with `rawBody`). */
  rawBody?: Buffer;
  /** The caller (routes with auth token or admin). */
  principal: Principal;
  hostId: string;
  req: FastifyRequest;
  reply: FastifyReply;
}

export interface JsonReply {
  status: number;
  body?: unknown;
}

interface RouteBase<P extends AnyObject, Q extends AnyObject, B extends z.ZodType> {
  method: "GET" | "POST" | "PUT" | "DELETE";
  /** Fastify syntax (`/v1/projects/:project`). */
  path: string;
  summary: string;
  tag: string;
  auth: Auth;
  params?: P;
  query?: Q;
  /** JSON body schema. */
  body?: B;
  /** Binary request bodies accepted (e.g. application/x-tar), described in OpenAPI. */
  binaryBody?: { contentTypes: string[]; description: string };
  /** Keep the body's exact bytes (up to maxBytes) as ctx.rawBody, e.g. to check a signature over them. */
  rawBody?: { maxBytes: number };
  responses: ResponseSpec[];
  /** The docs example for this route (docs/reference/api.md), when one is worth giving. */
  description?: string;
}

/** Answers JSON: the handler returns the status and the body, which is validated here. */
export interface JsonRoute<P extends AnyObject, Q extends AnyObject, B extends z.ZodType>
  extends RouteBase<P, Q, B> {
  kind: "json";
  handler(ctx: RouteContext<P, Q, B>): Promise<JsonReply>;
}

/** Writes its own reply (tar downloads, SSE, Prometheus text). */
export interface RawRoute<P extends AnyObject, Q extends AnyObject, B extends z.ZodType>
  extends RouteBase<P, Q, B> {
  kind: "raw";
  handler(ctx: RouteContext<P, Q, B>): Promise<void>;
}

/** A WebSocket (GET + upgrade); auth and parsing happen before the upgrade. */
export interface SocketRoute<P extends AnyObject, Q extends AnyObject> extends RouteBase<P, Q, z.ZodNever> {
  kind: "websocket";
  /** Checks that need an HTTP answer (404, 409) run here, before the upgrade. */
  prepare?(ctx: RouteContext<P, Q, z.ZodNever>): Promise<void>;
  handler(socket: WebSocket, ctx: RouteContext<P, Q, z.ZodNever>): void;
}

export type Route<
  P extends AnyObject = AnyObject,
  Q extends AnyObject = AnyObject,
  B extends z.ZodType = z.ZodType,
> = JsonRoute<P, Q, B> | RawRoute<P, Q, B> | SocketRoute<P, Q>;

/**
 * Helper that keeps each route's own types for its handler and erases them for the table.
 * (Handlers are contravariant in their context, so the erased table holds them as `Route`.)
 */
export function route<
  P extends AnyObject = z.ZodObject<Record<string, never>>,
  Q extends AnyObject = z.ZodObject<Record<string, never>>,
  B extends z.ZodType = z.ZodNever,
>(r: JsonRoute<P, Q, B> | RawRoute<P, Q, B> | (B extends z.ZodNever ? SocketRoute<P, Q> : never)): Route {
  return r as unknown as Route;
}

export const ProjectParams = z.object({ project: z.string() });
export const EnvParams = z.object({ project: z.string(), env: z.string() });
