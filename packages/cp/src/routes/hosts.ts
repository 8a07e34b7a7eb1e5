import { Host, HostList, JoinRequest, JoinResponse, RemovedHost } from "@denv/spec";
import { z } from "zod";
import { type Route, route } from "../http/route.js";
import type { Services } from "../services/container.js";

const HostParams = z.object({ id: z.string() });

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
      summary:
        "List hosts: all of them for an admin, the hosts its projects' environments use for other tokens",
      tag: "hosts",
      auth: "token",
      responses: [{ status: 200, description: "The hosts", schema: HostList }],
      handler: async ({ principal }) => ({ status: 200, body: { hosts: await s.hosts.list(principal) } }),
    }),
    route({
      kind: "json",
      method: "POST",
      path: "/v1/hosts/:id/drain",
      summary: "Drain a host: placement never picks it again; its environments and versions stay",
      tag: "hosts",
      auth: "admin",
      params: HostParams,
      responses: [{ status: 200, description: "The host, draining", schema: Host }],
      handler: async ({ principal, params }) => ({
        status: 200,
        body: await s.hosts.drain(principal, params.id),
      }),
    }),
    route({
      kind: "json",
      method: "DELETE",
      path: "/v1/hosts/:id",
      summary:
        "Remove a host and revoke its credential (its stream closes now); refused while it holds environments unless force",
      tag: "hosts",
      auth: "admin",
      params: HostParams,
      query: z.object({
        /** Remove it even though it holds environments: they are marked failed. */
        force: z.stringbool().optional(),
      }),
      responses: [{ status: 200, description: "What the removal did", schema: RemovedHost }],
      handler: async ({ principal, params, query }) => ({
        status: 200,
        body: await s.hosts.remove(principal, params.id, query.force === true),
      }),
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
