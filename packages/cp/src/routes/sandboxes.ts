import { CreateSandbox, Environment, SandboxBatch, SandboxList } from "@denv/spec";
import { z } from "zod";
import { EnvParams, type Route, route } from "../http/route.js";
import type { Services } from "../services/container.js";

export function sandboxRoutes(s: Services): Route[] {
  return [
    route({
      kind: "json",
      method: "POST",
      path: "/v1/sandboxes",
      summary: "Create a sandbox (or `count` of them): forks of a version, answered once ready",
      tag: "sandboxes",
      auth: "token",
      body: CreateSandbox,
      responses: [
        {
          status: 201,
          description:
            "The ready sandbox (sandbox true, expires_at); with count: {sandboxes}, each with its placement",
          schema: z.union([Environment, SandboxBatch]),
        },
      ],
      handler: async ({ principal, body }) => ({
        status: 201,
        body:
          body.count === undefined
            ? await s.sandboxes.create(principal, body)
            : await s.sandboxes.createMany(principal, { ...body, count: body.count }),
      }),
    }),
    route({
      kind: "json",
      method: "GET",
      path: "/v1/sandboxes",
      summary: "List sandboxes (a scoped token sees its project's only)",
      tag: "sandboxes",
      auth: "token",
      responses: [{ status: 200, description: "The sandboxes", schema: SandboxList }],
      handler: async ({ principal }) => ({
        status: 200,
        body: { sandboxes: await s.sandboxes.list(principal) },
      }),
    }),
    route({
      kind: "json",
      method: "DELETE",
      path: "/v1/sandboxes/:project/:env",
      summary: "Destroy a sandbox now",
      tag: "sandboxes",
      auth: "token",
      params: EnvParams,
      responses: [{ status: 204, description: "Destroyed" }],
      handler: async ({ principal, params }) => {
        await s.sandboxes.delete(principal, params.project, params.env);
        return { status: 204 };
      },
    }),
  ];
}
