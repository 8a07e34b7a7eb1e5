import { CreateSandbox, Environment, SandboxBatch, SandboxDestroy, SandboxList } from "@denv/spec";
import { z } from "zod";
import { EnvParams, type Route, route } from "../http/route.js";
import type { Services } from "../services/container.js";
import { WaitQuery } from "./common.js";

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
      summary:
        "Destroy a sandbox: answered once it is unreachable (exec, files and tunnels refused), the removal finishing on its host",
      tag: "sandboxes",
      auth: "token",
      params: EnvParams,
      query: WaitQuery,
      responses: [
        {
          status: 202,
          description: "Sealed and destroying; its room on the host is released once the host removed it",
          schema: SandboxDestroy,
        },
        { status: 200, description: "With ?wait=true: gone from its host", schema: SandboxDestroy },
      ],
      handler: async ({ principal, params, query }) => {
        const r = await s.sandboxes.delete(principal, params.project, params.env, {
          wait: query.wait === true,
        });
        return { status: r.status === "destroyed" ? 200 : 202, body: r };
      },
    }),
  ];
}
