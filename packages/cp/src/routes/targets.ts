import { CreateJoinToken, CreateTarget, JoinToken, Target, TargetList } from "@denv/spec";
import { z } from "zod";
import { type Route, route } from "../http/route.js";
import type { Services } from "../services/container.js";

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
      summary: "List targets",
      tag: "targets",
      auth: "token",
      responses: [{ status: 200, description: "The targets", schema: TargetList }],
      handler: async () => ({ status: 200, body: { targets: await s.targets.list() } }),
    }),
    route({
      kind: "json",
      method: "POST",
      path: "/v1/targets/:target/join-tokens",
      summary: "Create a join token for hosts of the target (its secret is shown once)",
      tag: "targets",
      auth: "admin",
      params: z.object({ target: z.string() }),
      body: CreateJoinToken,
      responses: [{ status: 201, description: "The join token, with `token` set", schema: JoinToken }],
      handler: async ({ principal, params, body }) => ({
        status: 201,
        body: await s.targets.createJoinToken(principal, params.target, body),
      }),
    }),
  ];
}
