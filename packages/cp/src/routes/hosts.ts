import { HostList, JoinRequest, JoinResponse } from "@denv/spec";
import { type Route, route } from "../http/route.js";
import type { Services } from "../services/container.js";

export function hostRoutes(s: Services): Route[] {
  return [
    route({
      kind: "json",
      method: "POST",
      path: "/v1/hosts/join",
      summary: "Join a host to the join token's target; answers the host credential (shown once)",
      tag: "hosts",
      auth: "none",
      body: JoinRequest,
      responses: [{ status: 201, description: "The host's id and credential", schema: JoinResponse }],
      handler: async ({ body }) => ({ status: 201, body: await s.hosts.join(body) }),
    }),
    route({
      kind: "json",
      method: "GET",
      path: "/v1/hosts",
      summary: "List hosts",
      tag: "hosts",
      auth: "token",
      responses: [{ status: 200, description: "The hosts", schema: HostList }],
      handler: async () => ({ status: 200, body: { hosts: await s.hosts.list() } }),
    }),
    route({
      kind: "websocket",
      method: "GET",
      path: "/v1/hosts/stream",
      summary: "The host stream (denvd dials out): protocol frames of packages/spec/src/protocol/",
      tag: "hosts",
      auth: "host",
      responses: [{ status: 101, description: "Upgraded; the host sends hello first" }],
      handler: (socket, { hostId }) => s.hub.accept(socket, hostId),
    }),
  ];
}
