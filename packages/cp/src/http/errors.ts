import { DenvError, ErrorResponse } from "@denv/spec";
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { ZodError } from "zod";
import { errorMessage, type Log } from "../log.js";
import type { WebAssets } from "./web-assets.js";

/** The body and status of any error, in the one shape clients branch on. */
export function toErrorResponse(err: unknown): { status: number; body: ErrorResponse } {
  if (err instanceof DenvError) {
    return {
      status: err.status,
      body: {
        error: {
          code: err.code,
          message: err.message,
          ...(err.details.length ? { details: [...err.details] } : {}),
        },
      },
    };
  }
  if (err instanceof ZodError) {
    const details = err.issues.map((i) => `${i.path.join(".") || "(body)"}: ${i.message}`);
    return {
      status: 400,
      body: {
        error: { code: "invalid_request", message: `invalid request: ${details[0] ?? "bad input"}`, details },
      },
    };
  }
  const fe = err as Partial<FastifyError>;
  if (typeof fe.statusCode === "number" && fe.statusCode >= 400 && fe.statusCode < 500) {
    const code =
      fe.statusCode === 401 ? "unauthorized" : fe.statusCode === 404 ? "not_found" : "invalid_request";
    return { status: fe.statusCode, body: { error: { code, message: errorMessage(err) } } };
  }
  return {
    status: 500,
    body: { error: { code: "internal", message: "internal error: see the control plane's log" } },
  };
}

/**
 * Fastify's `frameworkErrors`: what its router refuses before any route runs (a malformed URL, a
 * path parameter over the length limit) answers in the same shape as everything else.
 */
export function frameworkError(err: FastifyError, _req: FastifyRequest, reply: FastifyReply): void {
  const { status, body } = toErrorResponse(err);
  void reply.code(status).type("application/json").send(ErrorResponse.parse(body));
}

/**
 * The one place errors become HTTP: DenvError -> its status and {error:{code,message}}. A request
 * no route matched may be a page of the dashboard (`web`); everything else is a JSON 404.
 */
export function installErrorHandler(app: FastifyInstance, log: Log, web?: WebAssets): void {
  app.setErrorHandler((err, req, reply) => {
    const { status, body } = toErrorResponse(err);
    if (status >= 500)
      log.error("request failed", { method: req.method, url: req.url, error: errorMessage(err) });
    return reply.code(status).type("application/json").send(ErrorResponse.parse(body));
  });
  app.setNotFoundHandler(async (req, reply) => {
    if (web !== undefined && (await web.serve(req, reply))) return reply;
    const body = { error: { code: "not_found", message: `no route ${req.method} ${req.url.split("?")[0]}` } };
    return reply.code(404).send(ErrorResponse.parse(body));
  });
}
