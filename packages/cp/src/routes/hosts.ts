import {
  DenvError,
  HOSTS_PAGE,
  Host,
  HostList,
  HostMessages,
  JoinRequest,
  JoinResponse,
  NAME_PATTERN,
  RemovedHost,
} from "@denv/spec";
import { z } from "zod";
import { type Route, route } from "../http/route.js";
import type { Services } from "../services/container.js";
import type { HostPage } from "../services/host-service.js";

const HostParams = z.object({ id: z.string() });

const HostListQuery = z.object({
  /** Hosts per page: 1 to HOSTS_PAGE.max, default HOSTS_PAGE.default. */
  limit: z.string().optional(),
  /** The `next` of the previous page: hosts whose id sorts after it. */
  after: z.string().optional(),
});

/** The page a query asks for; a bad `limit` or `after` is a one-line 400 (HostMessages). */
function hostPage(q: z.output<typeof HostListQuery>): HostPage {
  let limit: number = HOSTS_PAGE.default;
  if (q.limit !== undefined) {
    limit = /^[0-9]{1,7}$/.test(q.limit) ? Number(q.limit) : 0;
    if (limit < 1 || limit > HOSTS_PAGE.max)
      throw new DenvError("invalid_request", HostMessages.pageLimit(HOSTS_PAGE.max));
  }
  if (q.after === undefined) return { limit };
  if (!NAME_PATTERN.test(q.after)) throw new DenvError("invalid_request", HostMessages.pageAfter);
  return { limit, after: q.after };
}

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
        "List hosts, a page at a time by id: all of them for an admin, the hosts its projects' environments use for other tokens",
      tag: "hosts",
      auth: "token",
      query: HostListQuery,
      responses: [{ status: 200, description: "A page of hosts; `next` when more follow", schema: HostList }],
      handler: async ({ principal, query }) => ({
        status: 200,
        body: await s.hosts.list(principal, hostPage(query)),
      }),
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
      handler: (socket, { hostId, req }) => s.hub.accept(socket, hostId, req.socket.remoteAddress),
    }),
  ];
}
