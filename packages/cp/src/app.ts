import websocket from "@fastify/websocket";
import Fastify, { type FastifyInstance } from "fastify";
import { installCors } from "./http/cors.js";
import { frameworkError, installErrorHandler } from "./http/errors.js";
import { buildOpenApi } from "./http/openapi.js";
import { registerRoutes } from "./http/register.js";
import type { Route } from "./http/route.js";
import { WebAssets } from "./http/web-assets.js";
import type { Log } from "./log.js";
import { allRoutes } from "./routes/index.js";
import type { Services } from "./services/container.js";

export interface AppOptions {
  services: Services;
  log: Log;
  /** Allowed CORS origins ("*" for any); empty: CORS off. */
  corsOrigins: readonly string[];
  /** The dashboard's built files (packages/web/dist), served at `/`; absent: no dashboard. */
  webDir?: string | undefined;
}

export interface App {
  fastify: FastifyInstance;
  routes: readonly Route[];
}

/**
 * Largest WebSocket message accepted. A data frame is at most 64 KiB before base64, but an exec's
 * start frame (and the command frame it becomes) carries the whole argv: Inspect checks ~1 MiB
 * of arguments.
 */
const MAX_WS_MESSAGE = 16 * 1024 * 1024;

/**
 * Builds the HTTP app from options only (no process.env): tests start it in-process on port 0.
 */
export async function buildApp(o: AppOptions): Promise<App> {
  const fastify = Fastify({
    logger: false,
    bodyLimit: 16 * 1024 * 1024,
    forceCloseConnections: true,
    frameworkErrors: frameworkError,
  });
  await fastify.register(websocket, { options: { maxPayload: MAX_WS_MESSAGE } });
  installErrorHandler(fastify, o.log, o.webDir === undefined ? undefined : new WebAssets(o.webDir));
  installCors(fastify, o.corsOrigins);
  o.services.metrics.install(fastify);
  fastify.addHook("onResponse", async (req, reply) => {
    o.log.debug("request", {
      method: req.method,
      url: req.url,
      status: reply.statusCode,
      ms: reply.elapsedTime,
    });
  });
  let openapi: unknown;
  const routes = allRoutes(o.services, () => {
    openapi ??= buildOpenApi(routes, o.services.publicUrl);
    return openapi;
  });
  registerRoutes(fastify, routes, {
    api: (h) => o.services.auth.authenticate(h),
    host: (h) => o.services.hosts.authenticate(h),
  });
  return { fastify, routes };
}
