import { Version, VersionList } from "@denv/spec";
import { z } from "zod";
import { ProjectParams, type Route, route } from "../http/route.js";
import type { Services } from "../services/container.js";

const VersionParams = z.object({ project: z.string(), number: z.coerce.number().int().positive() });

export function versionRoutes(s: Services): Route[] {
  return [
    route({
      kind: "json",
      method: "GET",
      path: "/v1/projects/:project/versions",
      summary: "List a project's versions, newest first",
      tag: "versions",
      auth: "token",
      params: ProjectParams,
      responses: [{ status: 200, description: "The versions", schema: VersionList }],
      handler: async ({ principal, params }) => ({
        status: 200,
        body: { versions: await s.versions.list(principal, params.project) },
      }),
    }),
    route({
      kind: "json",
      method: "GET",
      path: "/v1/versions/:project/:number",
      summary: "Get version PROJECT@vN",
      tag: "versions",
      auth: "token",
      params: VersionParams,
      responses: [{ status: 200, description: "The version", schema: Version }],
      handler: async ({ principal, params }) => ({
        status: 200,
        body: await s.versions.get(principal, params.project, params.number),
      }),
    }),
    route({
      kind: "json",
      method: "DELETE",
      path: "/v1/versions/:project/:number",
      summary: "Delete a version and its snapshot on its host (409 while environments run from it)",
      tag: "versions",
      auth: "token",
      params: VersionParams,
      responses: [{ status: 204, description: "Deleted" }],
      handler: async ({ principal, params }) => {
        await s.versions.delete(principal, params.project, params.number);
        return { status: 204 };
      },
    }),
  ];
}
