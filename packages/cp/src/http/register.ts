import { Readable } from "node:stream";
import { ControlPlaneMessages, DenvError } from "@denv/spec";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import type { z } from "zod";
import type { Principal } from "../services/access.js";
import type { AnyObject, Route, RouteContext } from "./route.js";

/** Content types passed to handlers as a stream, unread: uploads are never buffered whole. */
export const BINARY_TYPES = [
  "application/x-tar",
  "application/gzip",
  "application/x-gzip",
  "application/octet-stream",
];

export interface Authenticators {
  api(header: string | undefined): Promise<Principal>;
  host(header: string | undefined): Promise<{ id: string }>;
}

type Ctx = RouteContext<AnyObject, AnyObject, z.ZodType>;

const contexts = new WeakMap<FastifyRequest, Ctx>();
const rawBodies = new WeakMap<FastifyRequest, Buffer>();

/** Reads the body's bytes (refusing more than maxBytes) and hands the parser a copy of them. */
async function keepRawBody(req: FastifyRequest, payload: Readable, maxBytes: number): Promise<Readable> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const c of payload) {
    size += (c as Buffer).length;
    if (size > maxBytes) throw new DenvError("invalid_request", `the body is larger than ${maxBytes} bytes`);
    chunks.push(c as Buffer);
  }
  const buf = Buffer.concat(chunks);
  rawBodies.set(req, buf);
  return Readable.from([buf]);
}

function isStream(body: unknown): body is Readable {
  return typeof (body as Readable | null)?.pipe === "function";
}

function noPrincipal(): never {
  throw new DenvError("internal", "this route has no authenticated caller");
}

/** Registers the route table: auth and zod parsing before the handler (and before any upgrade). */
export function registerRoutes(app: FastifyInstance, routes: readonly Route[], auth: Authenticators): void {
  for (const type of BINARY_TYPES) {
    app.addContentTypeParser(type, (_req, payload, done) => done(null, payload));
  }
  for (const r of routes) {
    const preValidation = async (req: FastifyRequest, reply: FastifyReply): Promise<void> => {
      let principal: Principal | undefined;
      let hostId: string | undefined;
      if (r.auth === "token" || r.auth === "admin") {
        principal = await auth.api(req.headers.authorization);
        if (r.auth === "admin" && principal.role !== "admin") {
          throw new DenvError("forbidden", "this route needs an admin token");
        }
      } else if (r.auth === "host") {
        hostId = (await auth.host(req.headers.authorization)).id;
      }
      const params = (r.params?.parse(req.params) ?? {}) as Ctx["params"];
      const query = (r.query?.parse(req.query) ?? {}) as Ctx["query"];
      let body: unknown;
      if (isStream(req.body)) {
        if (!r.binaryBody) throw new DenvError("invalid_request", `${r.method} ${r.path} takes a JSON body`);
      } else if (r.body) {
        body = r.body.parse(req.body ?? {});
      }
      const ctx: Ctx = {
        params,
        query,
        body,
        raw: req.body,
        ...(rawBodies.has(req) ? { rawBody: rawBodies.get(req) } : {}),
        get principal(): Principal {
          return principal ?? noPrincipal();
        },
        get hostId(): string {
          return hostId ?? noPrincipal();
        },
        req,
        reply,
      };
      contexts.set(req, ctx);
      if (r.kind === "websocket") await r.prepare?.(ctx as never);
    };
    const ctxOf = (req: FastifyRequest): Ctx => {
      const ctx = contexts.get(req);
      if (!ctx) throw new DenvError("internal", "request context missing");
      return ctx;
    };

    if (r.kind === "websocket") {
      app.route({
        method: "GET",
        url: r.path,
        preValidation,
        wsHandler: (socket, req) => r.handler(socket, ctxOf(req) as never),
        // A plain GET (no upgrade) gets an answer in the API's error shape, not an empty 404.
        handler: async () => {
          throw new DenvError("invalid_request", ControlPlaneMessages.notAnUpgrade(r.path));
        },
      });
      continue;
    }
    const raw = r.rawBody;
    app.route({
      method: r.method,
      url: r.path,
      preValidation,
      ...(raw
        ? {
            bodyLimit: raw.maxBytes,
            preParsing: (req: FastifyRequest, _reply: FastifyReply, payload: Readable) =>
              keepRawBody(req, payload, raw.maxBytes),
          }
        : {}),
      handler: async (req, reply) => {
        const ctx = ctxOf(req);
        if (r.kind === "raw") {
          await r.handler(ctx as never);
          return reply;
        }
        const out = await r.handler(ctx as never);
        const spec = r.responses.find((s) => s.status === out.status);
        if (!spec)
          throw new DenvError(
            "internal",
            `${r.method} ${r.path} answered ${out.status}, which it does not declare`,
          );
        if (out.status === 204) return reply.code(204).send();
        const body = spec.schema ? spec.schema.parse(out.body) : out.body;
        return reply
          .code(out.status)
          .type(spec.contentType ?? "application/json")
          .send(body);
      },
    });
  }
}
