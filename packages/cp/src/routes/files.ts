import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { DenvError, FilesPutResponse } from "@denv/spec";
import { z } from "zod";
import { EnvParams, type Route, route } from "../http/route.js";
import { errorMessage } from "../log.js";
import type { Services } from "../services/container.js";
import { sendAndDrain } from "./socket-io.js";

const FilesQuery = z.object({
  path: z.string().min(1),
  service: z.string().optional(),
  user: z.string().optional(),
});

export function fileRoutes(s: Services): Route[] {
  return [
    route({
      kind: "json",
      method: "PUT",
      path: "/v1/environments/:project/:env/files",
      summary: "Extract a tar into directory `path` of a service (special files are refused, protection 3)",
      tag: "files",
      auth: "token",
      params: EnvParams,
      query: FilesQuery,
      binaryBody: { contentTypes: ["application/x-tar"], description: "A tar; streamed to the host" },
      responses: [{ status: 200, description: "What was extracted", schema: FilesPutResponse }],
      handler: async ({ principal, params, query, raw }) => {
        if (!(raw instanceof Readable))
          throw new DenvError("invalid_request", "send the files as application/x-tar");
        return {
          status: 200,
          body: await s.episodes.putFiles(principal, params.project, params.env, query, raw, (body) =>
            s.environments.putFiles(principal, params.project, params.env, query, body),
          ),
        };
      },
    }),
    route({
      kind: "raw",
      method: "GET",
      path: "/v1/environments/:project/:env/files",
      summary: "Download `path` (a file or a directory) as a tar, under its base name",
      tag: "files",
      auth: "token",
      params: EnvParams,
      query: FilesQuery,
      responses: [
        { status: 200, description: "A tar, streamed from the host", contentType: "application/x-tar" },
      ],
      handler: async ({ principal, params, query, reply }) => {
        const tar = await s.environments.getFiles(principal, params.project, params.env, query);
        reply.hijack();
        reply.raw.writeHead(200, {
          ...(reply.getHeaders() as Record<string, string>),
          "content-type": "application/x-tar",
        });
        // Headers are out: a failure now can only cut the download short.
        await pipeline(tar, reply.raw).catch(() => reply.raw.destroy());
      },
    }),
    route({
      kind: "websocket",
      method: "GET",
      path: "/v1/environments/:project/:env/connect",
      summary: "A TCP tunnel to a service port: binary frames carry the byte stream both ways",
      tag: "files",
      auth: "token",
      params: EnvParams,
      prepare: async ({ principal, params }) => {
        await s.environments.target(principal, params.project, params.env);
      },
      query: z.object({ service: z.string(), port: z.coerce.number().int().min(1).max(65535) }),
      responses: [{ status: 101, description: "Upgraded; binary frames both ways" }],
      handler: (socket, { principal, params, query }) => {
        void (async () => {
          const call = await s.environments.connect(principal, params.project, params.env, query);
          let chain = Promise.resolve();
          socket.on("message", (data: Buffer) => {
            socket.pause();
            chain = chain
              .then(() => call.outbound.write("tunnel", Buffer.from(data)))
              .catch(() => socket.close(1011, "the tunnel closed"))
              .finally(() => socket.resume());
          });
          socket.on("close", () => {
            call.outbound.end();
            s.hub.cancel(call.commandId);
            call.close();
          });
          for await (const chunk of call.inbound)
            await sendAndDrain(socket, (chunk as { data: Buffer }).data);
          socket.close(1000, "the service closed the connection");
        })().catch((err: unknown) => {
          if (socket.readyState === socket.OPEN) socket.close(1011, errorMessage(err).slice(0, 120));
        });
      },
    }),
  ];
}
