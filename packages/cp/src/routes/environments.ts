import {
  Environment,
  EnvironmentList,
  ForkRequest,
  LogsResponse,
  ProbeResult,
  RollbackRequest,
} from "@denv/spec";
import { z } from "zod";
import { EnvParams, ProjectParams, type Route, route } from "../http/route.js";
import type { Services } from "../services/container.js";
import { DEPLOYMENT_RESPONSES, deploymentReply, WaitQuery } from "./common.js";

const CHANGES = [
  [
    "snapshot",
    "POST",
    "/snapshot",
    "Snapshot the environment as the project's next version (result: Version)",
  ],
  ["verify", "POST", "/verify", "Grade the environment with its verifier on a fork (result: VerifyResponse)"],
  ["stop", "POST", "/stop", "Stop the environment's services (its disk state stays)"],
  ["start", "POST", "/start", "Start a stopped environment again"],
  ["destroy", "DELETE", "", "Destroy the environment"],
] as const;

export function environmentRoutes(s: Services): Route[] {
  return [
    route({
      kind: "json",
      method: "GET",
      path: "/v1/projects/:project/environments",
      summary: "List a project's environments",
      tag: "environments",
      auth: "token",
      params: ProjectParams,
      responses: [{ status: 200, description: "The environments", schema: EnvironmentList }],
      handler: async ({ principal, params }) => ({
        status: 200,
        body: { environments: await s.environments.list(principal, params.project) },
      }),
    }),
    route({
      kind: "json",
      method: "GET",
      path: "/v1/environments/:project/:env",
      summary: "Get an environment",
      tag: "environments",
      auth: "token",
      params: EnvParams,
      responses: [{ status: 200, description: "The environment", schema: Environment }],
      handler: async ({ principal, params }) => ({
        status: 200,
        body: await s.environments.get(principal, params.project, params.env),
      }),
    }),
    route({
      kind: "json",
      method: "POST",
      path: "/v1/environments/:project/:env/fork",
      summary: "Fork a version (default: the one this environment runs) as a new environment",
      tag: "environments",
      auth: "token",
      params: EnvParams,
      query: WaitQuery,
      body: ForkRequest,
      responses: DEPLOYMENT_RESPONSES,
      handler: async ({ principal, params, query, body }) =>
        deploymentReply(s, await s.deployments.fork(principal, params.project, params.env, body), query.wait),
    }),
    route({
      kind: "json",
      method: "POST",
      path: "/v1/environments/:project/:env/rollback",
      summary: "Roll the environment back to an older version",
      tag: "environments",
      auth: "token",
      params: EnvParams,
      query: WaitQuery,
      body: RollbackRequest,
      responses: DEPLOYMENT_RESPONSES,
      handler: async ({ principal, params, query, body }) =>
        deploymentReply(
          s,
          await s.deployments.rollback(principal, params.project, params.env, body),
          query.wait,
        ),
    }),
    ...CHANGES.map(([kind, method, suffix, summary]) =>
      route({
        kind: "json",
        method,
        path: `/v1/environments/:project/:env${suffix}`,
        summary,
        tag: "environments",
        auth: "token",
        params: EnvParams,
        query: WaitQuery,
        responses: DEPLOYMENT_RESPONSES,
        handler: async ({ principal, params, query }) =>
          deploymentReply(
            s,
            await s.deployments.change(principal, params.project, params.env, kind),
            query.wait,
          ),
      }),
    ),
    route({
      kind: "json",
      method: "GET",
      path: "/v1/environments/:project/:env/logs",
      summary: "Service logs",
      tag: "environments",
      auth: "token",
      params: EnvParams,
      query: z.object({
        service: z.string().optional(),
        tail: z.coerce.number().int().positive().optional(),
      }),
      responses: [{ status: 200, description: "stdout and stderr of the service", schema: LogsResponse }],
      handler: async ({ principal, params, query }) => ({
        status: 200,
        body: await s.environments.logs(principal, params.project, params.env, query),
      }),
    }),
    route({
      kind: "json",
      method: "GET",
      path: "/v1/environments/:project/:env/probe",
      summary: "Run the egress probe now (protection 5)",
      tag: "environments",
      auth: "token",
      params: EnvParams,
      responses: [{ status: 200, description: "The probe's result", schema: ProbeResult }],
      handler: async ({ principal, params }) => ({
        status: 200,
        body: await s.environments.probe(principal, params.project, params.env),
      }),
    }),
  ];
}
