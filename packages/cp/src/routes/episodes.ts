import { EPISODE_LOG, EpisodeLog, ReplayList, ReplayRequest, ReplayResponse } from "@denv/spec";
import { z } from "zod";
import { EnvParams, type Route, route } from "../http/route.js";
import type { Services } from "../services/container.js";

const PageQuery = z.object({
  after: z.coerce.number().int().nonnegative().optional(),
  limit: z.coerce.number().int().positive().max(EPISODE_LOG.page.max).optional(),
});

export function episodeRoutes(s: Services): Route[] {
  return [
    route({
      kind: "json",
      method: "GET",
      path: "/v1/environments/:project/:env/episode",
      summary: "The episode's command log: each exec and files put, with digests (paged by seq)",
      tag: "environments",
      auth: "token",
      params: EnvParams,
      query: PageQuery,
      responses: [{ status: 200, description: "One page of the log", schema: EpisodeLog }],
      handler: async ({ principal, params, query }) => ({
        status: 200,
        body: await s.replays.log(principal, params.project, params.env, query),
      }),
    }),
    route({
      kind: "json",
      method: "POST",
      path: "/v1/environments/:project/:env/replay",
      summary:
        "Run the episode's log again on a fresh fork of the version it started from, step by step, and say where results diverge",
      tag: "environments",
      auth: "token",
      params: EnvParams,
      body: ReplayRequest,
      responses: [
        { status: 200, description: "Each step's outcome and the replayed fork", schema: ReplayResponse },
      ],
      handler: async ({ principal, params, body }) => ({
        status: 200,
        body: await s.replays.replay(principal, params.project, params.env, body),
      }),
    }),
    route({
      kind: "json",
      method: "GET",
      path: "/v1/environments/:project/:env/replays",
      summary: "The episode's kept replays, newest first: the fork, the version, each step's status",
      tag: "environments",
      auth: "token",
      params: EnvParams,
      responses: [{ status: 200, description: "The replays", schema: ReplayList }],
      handler: async ({ principal, params }) => ({
        status: 200,
        body: await s.replays.list(principal, params.project, params.env),
      }),
    }),
  ];
}
