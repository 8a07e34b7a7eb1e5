import { CreateProject, Project, ProjectList } from "@denv/spec";
import { ProjectParams, type Route, route } from "../http/route.js";
import type { Services } from "../services/container.js";

export function projectRoutes(s: Services): Route[] {
  return [
    route({
      kind: "json",
      method: "POST",
      path: "/v1/projects",
      summary: "Create a project",
      tag: "projects",
      auth: "admin",
      body: CreateProject,
      responses: [{ status: 201, description: "The project", schema: Project }],
      handler: async ({ principal, body }) => ({
        status: 201,
        body: await s.projects.create(principal, body),
      }),
    }),
    route({
      kind: "json",
      method: "GET",
      path: "/v1/projects",
      summary: "List projects (a scoped token sees its own only)",
      tag: "projects",
      auth: "token",
      responses: [{ status: 200, description: "The projects", schema: ProjectList }],
      handler: async ({ principal }) => ({
        status: 200,
        body: { projects: await s.projects.list(principal) },
      }),
    }),
    route({
      kind: "json",
      method: "GET",
      path: "/v1/projects/:project",
      summary: "Get a project",
      tag: "projects",
      auth: "token",
      params: ProjectParams,
      responses: [{ status: 200, description: "The project", schema: Project }],
      handler: async ({ principal, params }) => ({
        status: 200,
        body: await s.projects.get(principal, params.project),
      }),
    }),
    route({
      kind: "json",
      method: "DELETE",
      path: "/v1/projects/:project",
      summary: "Delete a project (409 while it has environments); its versions are deleted on their hosts",
      tag: "projects",
      auth: "admin",
      params: ProjectParams,
      responses: [{ status: 204, description: "Deleted" }],
      handler: async ({ principal, params }) => {
        await s.projects.delete(principal, params.project);
        return { status: 204 };
      },
    }),
  ];
}
