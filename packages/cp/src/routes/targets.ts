import { CreateJoinToken, CreateTarget, JoinToken, JoinTokenList, Target, TargetList } from "@denv/spec";
import { z } from "zod";
import { type Route, route } from "../http/route.js";
import type { Services } from "../services/container.js";

const TargetParams = z.object({ target: z.string() });

export function targetRoutes(s: Services): Route[] {
  return [
    route({
      kind: "json",
      method: "POST",
      path: "/v1/targets",
      summary: "Create a target (kind hosts; other kinds are not available yet)",
      tag: "targets",
      auth: "admin",
      body: CreateTarget,
      responses: [{ status: 201, description: "The target", schema: Target }],
      handler: async ({ principal, body }) => ({
        status: 201,
        body: await s.targets.create(principal, body),
      }),
    }),
    route({
      kind: "json",
      method: "GET",
      path: "/v1/targets",
      summary: "List targets: all of them for an admin, those of the hosts it may list for other tokens",
      tag: "targets",
      auth: "token",
      responses: [{ status: 200, description: "The targets", schema: TargetList }],
      handler: async ({ principal }) => ({ status: 200, body: { targets: await s.targets.list(principal) } }),
    }),
    route({
      kind: "json",
      method: "POST",
      path: "/v1/targets/:target/join-tokens",
      summary: "Create a join token for hosts of the target (its secret is shown once)",
      tag: "targets",
      auth: "admin",
      params: TargetParams,
      body: CreateJoinToken,
      responses: [{ status: 201, description: "The join token, with `token` set", schema: JoinToken }],
      handler: async ({ principal, params, body }) => ({
        status: 201,
        body: await s.targets.createJoinToken(principal, params.target, body),
      }),
    }),
    route({
      kind: "json",
      method: "GET",
      path: "/v1/targets/:target/join-tokens",
      summary: "List the target's join tokens, revoked ones included (never their secrets)",
      tag: "targets",
      auth: "admin",
      params: TargetParams,
      responses: [{ status: 200, description: "The join tokens, without `token`", schema: JoinTokenList }],
      handler: async ({ principal, params }) => ({
        status: 200,
        body: { join_tokens: await s.targets.listJoinTokens(principal, params.target) },
      }),
    }),
    route({
      kind: "json",
      method: "DELETE",
      path: "/v1/targets/:target/join-tokens/:id",
      summary: "Revoke a join token: it joins no more hosts (hosts that joined with it stay)",
      tag: "targets",
      auth: "admin",
      params: z.object({ target: z.string(), id: z.string() }),
      responses: [{ status: 204, description: "Revoked (also when it already was)" }],
      handler: async ({ principal, params }) => {
        await s.targets.revokeJoinToken(principal, params.target, params.id);
        return { status: 204 };
      },
    }),
  ];
}
