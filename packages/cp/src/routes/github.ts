import { ConnectGithubRequest, GithubConnection, GithubWebhookReply } from "@denv/spec";
import { z } from "zod";
import { ProjectParams, type Route, route } from "../http/route.js";
import type { Services } from "../services/container.js";

/** GitHub's largest webhook payload. */
const MAX_DELIVERY_BYTES = 25 * 1024 ** 2;

export function githubRoutes(s: Services): Route[] {
  return [
    route({
      kind: "json",
      method: "POST",
      path: "/v1/projects/:project/github",
      summary: "Connect the project to a GitHub repository: pushes to its branch deploy alpha",
      tag: "github",
      // Admin only: the app may be installed on repositories the caller cannot read, and a
      // connected repository's source is fetched with the app's token into the project, where
      // any member of it can read it.
      auth: "admin",
      params: ProjectParams,
      body: ConnectGithubRequest,
      responses: [{ status: 200, description: "The connection", schema: GithubConnection }],
      handler: async ({ principal, params, body }) => ({
        status: 200,
        body: await s.github.connect(principal, params.project, body),
      }),
    }),
    route({
      kind: "json",
      method: "GET",
      path: "/v1/projects/:project/github",
      summary: "The project's GitHub connection",
      tag: "github",
      auth: "token",
      params: ProjectParams,
      responses: [{ status: 200, description: "The connection", schema: GithubConnection }],
      handler: async ({ principal, params }) => ({
        status: 200,
        body: await s.github.connection(principal, params.project),
      }),
    }),
    route({
      kind: "json",
      method: "POST",
      path: "/v1/github/webhook",
      summary: "GitHub's webhook deliveries (signed with the app's webhook secret)",
      tag: "github",
      auth: "none",
      rawBody: { maxBytes: MAX_DELIVERY_BYTES },
      body: z.unknown(),
      responses: [
        {
          status: 200,
          description: "Handled (a ping, an installation, an ignored event, a duplicate)",
          schema: GithubWebhookReply,
        },
        { status: 202, description: "A push that started a deploy of alpha", schema: GithubWebhookReply },
      ],
      handler: async ({ req, rawBody }) => {
        const h = (name: string) => {
          const v = req.headers[name];
          return typeof v === "string" ? v : undefined;
        };
        return s.github.webhook({
          event: h("x-github-event"),
          delivery: h("x-github-delivery"),
          signature: h("x-hub-signature-256"),
          body: rawBody ?? Buffer.alloc(0),
        });
      },
    }),
  ];
}
