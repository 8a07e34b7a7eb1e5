import { Readable } from "node:stream";
import { DeployGitRequest, Deployment, DeploymentList } from "@denv/spec";
import { z } from "zod";
import { BINARY_TYPES } from "../http/register.js";
import { ProjectParams, type Route, route } from "../http/route.js";
import type { Services } from "../services/container.js";
import { DEPLOYMENT_RESPONSES, deploymentReply, WaitQuery } from "./common.js";

const SSE_KEEPALIVE_MS = 15_000;

/** One server-sent event of a deployment's log, as the wire frames it (`data` is JSON text). */
const LogEvent = z.object({
  id: z.string().optional(),
  event: z.enum(["phase", "log", "done"]),
  data: z.string(),
});

const PlacementQuery = z
  .string()
  .regex(/^[^=,\s]+=[^,]*(,[^=,\s]+=[^,]*)*$/, "expected k=v,k2=v2")
  .transform((text) =>
    Object.fromEntries(text.split(",").map((kv) => kv.split(/=(.*)/s, 2) as [string, string])),
  );

export function deploymentRoutes(s: Services): Route[] {
  return [
    route({
      kind: "json",
      method: "POST",
      path: "/v1/projects/:project/deploy",
      summary: "Deploy the uploaded project folder (a tar, optionally gzipped) to an environment",
      tag: "deployments",
      auth: "token",
      params: ProjectParams,
      query: WaitQuery.extend({
        environment: z.string().default("alpha"),
        /** The target to place on (default: local). */
        target: z.string().optional(),
        /** Placement labels the host must carry, k=v,k2=v2 (denv deploy --placement k=v). */
        placement: PlacementQuery.optional(),
      }),
      body: DeployGitRequest,
      binaryBody: {
        contentTypes: BINARY_TYPES,
        description: "The project folder as a tar (gzip allowed); streamed to the host, not kept",
      },
      responses: DEPLOYMENT_RESPONSES,
      handler: async ({ principal, params, query, body, raw, req }) => {
        // A client may say what its folder hashes to (its own content key, e.g. the Inspect and
        // Harbor adapters' deploy-once check); it is recorded as evidence, never trusted for more.
        const declared = req.headers["x-denv-source-sha256"];
        const sourceSha256 =
          typeof declared === "string" && /^(sha256:)?[0-9a-f]{64}$/.test(declared) ? declared : undefined;
        const source =
          raw instanceof Readable
            ? { kind: "tar" as const, body: raw, sourceSha256: sourceSha256 || undefined }
            : { kind: "git" as const, ref: body.git_ref };
        const d = await s.deployments.deploy(principal, params.project, query, source);
        return deploymentReply(s, d, query.wait);
      },
    }),
    route({
      kind: "json",
      method: "GET",
      path: "/v1/projects/:project/deployments",
      summary: "List a project's deployments, newest first",
      tag: "deployments",
      auth: "token",
      params: ProjectParams,
      responses: [{ status: 200, description: "The deployments", schema: DeploymentList }],
      handler: async ({ principal, params }) => ({
        status: 200,
        body: { deployments: await s.deployments.list(principal, params.project) },
      }),
    }),
    route({
      kind: "json",
      method: "GET",
      path: "/v1/deployments/:id",
      summary: "Get a deployment with its phases",
      tag: "deployments",
      auth: "token",
      params: z.object({ id: z.string() }),
      responses: [{ status: 200, description: "The deployment", schema: Deployment }],
      handler: async ({ principal, params }) => ({
        status: 200,
        body: await s.deployments.get(principal, params.id),
      }),
    }),
    route({
      kind: "raw",
      method: "GET",
      path: "/v1/deployments/:id/log",
      summary: "The deployment's phase log as server-sent events: the past first, then live",
      tag: "deployments",
      auth: "token",
      params: z.object({ id: z.string() }),
      responses: [
        {
          status: 200,
          description: "Events `phase` (Phase), `log` ({line}), `done` (Deployment); each with id = sequence",
          contentType: "text/event-stream",
          schema: LogEvent,
        },
      ],
      handler: async ({ principal, params, req, reply }) => {
        const after = Number(req.headers["last-event-id"] ?? 0) || 0;
        const raw = reply.raw;
        const write = (event: string, data: unknown, id?: number) =>
          raw.write(
            `${id !== undefined ? `id: ${id}\n` : ""}event: ${event}\ndata: ${JSON.stringify(data)}\n\n`,
          );
        let unsubscribe: (() => void) | undefined;
        let keepalive: NodeJS.Timeout | undefined;
        const end = () => {
          unsubscribe?.();
          clearInterval(keepalive);
          if (!raw.writableEnded) raw.end();
        };
        // Authorization and existence are checked before the stream starts (a 404 stays a 404).
        await s.deployments.get(principal, params.id);
        reply.hijack();
        raw.writeHead(200, {
          ...(reply.getHeaders() as Record<string, string>),
          "content-type": "text/event-stream",
          "cache-control": "no-cache",
          connection: "keep-alive",
        });
        req.raw.on("close", end);
        keepalive = setInterval(() => raw.write(": keepalive\n\n"), SSE_KEEPALIVE_MS);
        unsubscribe = await s.deployments.follow(principal, params.id, after, {
          entry: (e) => write(e.event, e.data, e.seq),
          done: (d) => {
            write("done", d);
            end();
          },
        });
        if (raw.writableEnded) unsubscribe();
      },
    }),
  ];
}
