import type { FastifyInstance } from "fastify";

const ALLOW_HEADERS = "authorization, content-type, last-event-id";
const ALLOW_METHODS = "GET, POST, PUT, DELETE, OPTIONS";

/**
 * CORS by hand (few headers, no plugin): off unless origins are configured. An allowed origin
 * (or any, with "*") gets Access-Control-Allow-Origin on every answer, and preflights are
 * answered with 204. Tokens travel in the Authorization header, never cookies, so credentials
 * mode is not offered.
 */
export function installCors(app: FastifyInstance, origins: readonly string[]): void {
  if (origins.length === 0) return;
  const any = origins.includes("*");
  const allowed = (origin: string | undefined): origin is string =>
    origin !== undefined && (any || origins.includes(origin));

  app.addHook("onRequest", async (req, reply) => {
    const origin = req.headers.origin;
    if (!allowed(origin)) return;
    reply.header("access-control-allow-origin", any ? "*" : origin);
    if (!any) reply.header("vary", "Origin");
  });

  app.options("/*", async (req, reply) => {
    if (!allowed(req.headers.origin) || req.headers["access-control-request-method"] === undefined) {
      return reply.code(204).send();
    }
    return reply
      .code(204)
      .header("access-control-allow-methods", ALLOW_METHODS)
      .header("access-control-allow-headers", ALLOW_HEADERS)
      .header("access-control-max-age", "600")
      .send();
  });
}
