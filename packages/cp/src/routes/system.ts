import { Health, WhoAmI } from "@denv/spec";
import { type Route, route } from "../http/route.js";
import type { Services } from "../services/container.js";

export function systemRoutes(s: Services, openapi: () => unknown): Route[] {
  return [
    route({
      kind: "json",
      method: "GET",
      path: "/healthz",
      summary: "Liveness",
      tag: "system",
      auth: "none",
      responses: [{ status: 200, description: "The control plane answers", schema: Health }],
      handler: async () => ({ status: 200, body: { ok: true } }),
    }),
    route({
      kind: "raw",
      method: "GET",
      path: "/metrics",
      summary: "Prometheus metrics",
      tag: "system",
      auth: "none",
      responses: [{ status: 200, description: "Prometheus text format", contentType: "text/plain" }],
      handler: async ({ reply }) => {
        const text = await s.metrics.render({
          hostsOnline: () => s.hub.onlineCount(),
          deploymentsByStatus: () => s.store.countDeploymentsByStatus(),
        });
        await reply.type("text/plain; version=0.0.4").send(text);
      },
    }),
    route({
      kind: "raw",
      method: "GET",
      path: "/v1/openapi.json",
      summary: "The OpenAPI 3.1 document of this API",
      tag: "system",
      auth: "none",
      responses: [{ status: 200, description: "OpenAPI 3.1, generated from the route table" }],
      handler: async ({ reply }) => {
        await reply.type("application/json").send(openapi());
      },
    }),
    route({
      kind: "json",
      method: "GET",
      path: "/v1/whoami",
      summary: "The calling token",
      tag: "tokens",
      auth: "token",
      responses: [{ status: 200, description: "The token's identity", schema: WhoAmI }],
      handler: async ({ principal: p }) => ({
        status: 200,
        body: { id: p.tokenId, name: p.name, role: p.role, project: p.project || undefined },
      }),
    }),
  ];
}
