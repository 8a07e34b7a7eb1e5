import { ApiToken, CreateApiToken, TokenList } from "@denv/spec";
import { z } from "zod";
import { type Route, route } from "../http/route.js";
import type { Services } from "../services/container.js";

export function tokenRoutes(s: Services): Route[] {
  return [
    route({
      kind: "json",
      method: "POST",
      path: "/v1/tokens",
      summary: "Create an API token (its secret is shown once)",
      tag: "tokens",
      auth: "admin",
      body: CreateApiToken,
      responses: [{ status: 201, description: "The token, with `token` set", schema: ApiToken }],
      handler: async ({ principal, body }) => ({
        status: 201,
        body: await s.auth.create(principal, body),
      }),
    }),
    route({
      kind: "json",
      method: "GET",
      path: "/v1/tokens",
      summary: "List API tokens (never their secrets)",
      tag: "tokens",
      auth: "admin",
      responses: [{ status: 200, description: "The tokens", schema: TokenList }],
      handler: async ({ principal }) => ({ status: 200, body: { tokens: await s.auth.list(principal) } }),
    }),
    route({
      kind: "json",
      method: "DELETE",
      path: "/v1/tokens/:id",
      summary: "Revoke an API token",
      tag: "tokens",
      auth: "admin",
      params: z.object({ id: z.string() }),
      responses: [{ status: 204, description: "Revoked" }],
      handler: async ({ principal, params }) => {
        await s.auth.delete(principal, params.id);
        return { status: 204 };
      },
    }),
  ];
}
