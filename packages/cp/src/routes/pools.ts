import { Pool, PoolList, SetPool } from "@denv/spec";
import { ProjectParams, type Route, route } from "../http/route.js";
import type { Services } from "../services/container.js";

/** Warm fork pools (docs/how-to/warm-pools.md). */
export function poolRoutes(s: Services): Route[] {
  return [
    route({
      kind: "json",
      method: "GET",
      path: "/v1/pools",
      summary: "List the projects' warm fork pools: size, where it comes from, ready and filling forks",
      tag: "pools",
      auth: "token",
      responses: [{ status: 200, description: "The pools", schema: PoolList }],
      handler: async ({ principal }) => ({ status: 200, body: { pools: await s.pools.list(principal) } }),
    }),
    route({
      kind: "json",
      method: "GET",
      path: "/v1/projects/:project/pool",
      summary: "Show a project's warm fork pool",
      tag: "pools",
      auth: "token",
      params: ProjectParams,
      responses: [{ status: 200, description: "The pool", schema: Pool }],
      handler: async ({ principal, params }) => ({
        status: 200,
        body: await s.pools.show(principal, params.project),
      }),
    }),
    route({
      kind: "json",
      method: "PUT",
      path: "/v1/projects/:project/pool",
      summary: "Set a project's pool size (admin); null goes back to its file's x-denv.pool",
      tag: "pools",
      auth: "token",
      params: ProjectParams,
      body: SetPool,
      responses: [
        { status: 200, description: "The pool, refilling or shrinking to its new size", schema: Pool },
      ],
      handler: async ({ principal, params, body }) => ({
        status: 200,
        body: await s.pools.set(principal, params.project, body.size),
      }),
    }),
  ];
}
