import * as api from "@denv/spec";
import { z } from "zod";
import type { Route } from "./route.js";

/**
 * /v1/openapi.json, generated from the route table and spec's zod schemas (z.toJSONSchema).
 * Named schemas become components and are referenced; the rest is inlined.
 */

const NAMED: Record<string, z.ZodType> = {
  ErrorResponse: api.ErrorResponse,
  Project: api.Project,
  CreateProject: api.CreateProject,
  Environment: api.Environment,
  Deployment: api.Deployment,
  Version: api.Version,
  Target: api.Target,
  CreateTarget: api.CreateTarget,
  Host: api.Host,
  CreateJoinToken: api.CreateJoinToken,
  JoinToken: api.JoinToken,
  JoinRequest: api.JoinRequest,
  JoinResponse: api.JoinResponse,
  CreateApiToken: api.CreateApiToken,
  ApiToken: api.ApiToken,
  ForkRequest: api.ForkRequest,
  RollbackRequest: api.RollbackRequest,
  CreateSandbox: api.CreateSandbox,
  VerifyResponse: api.VerifyResponse,
  ExecRequest: api.ExecRequest,
  ExecResponse: api.ExecResponse,
  ProbeResult: api.ProbeResult,
  WhoAmI: api.WhoAmI,
  Health: api.Health,
  DeployGitRequest: api.DeployGitRequest,
  TokenList: api.TokenList,
  ProjectList: api.ProjectList,
  DeploymentList: api.DeploymentList,
  EnvironmentList: api.EnvironmentList,
  SandboxList: api.SandboxList,
  VersionList: api.VersionList,
  TargetList: api.TargetList,
  HostList: api.HostList,
  RemovedHost: api.RemovedHost,
  JoinTokenList: api.JoinTokenList,
  FilesPutResponse: api.FilesPutResponse,
  LogsResponse: api.LogsResponse,
  ExecStreamClientFrame: api.ExecStreamClientFrame,
  ExecStreamServerFrame: api.ExecStreamServerFrame,
};

type Json = Record<string, unknown>;

const REF = (name: string) => `#/components/schemas/${name}`;

function nameOf(schema: z.ZodType): string | undefined {
  return Object.entries(NAMED).find(([, s]) => s === schema)?.[0];
}

/** Request schemas as inputs (defaults optional), responses as outputs (defaults present). */
function components(): Json {
  const out: Json = {};
  for (const io of ["input", "output"] as const) {
    const registry = z.registry<{ id: string }>();
    for (const [name, schema] of Object.entries(NAMED))
      registry.add(schema, { id: io === "input" ? `${name}Input` : name });
    const { schemas } = z.toJSONSchema(registry, { uri: REF, io, unrepresentable: "any" });
    for (const [name, s] of Object.entries(schemas)) {
      const { $schema: _s, $id: _i, ...rest } = s as Json;
      out[name] = rest;
    }
  }
  // Inputs identical to their output form are served once, under the plain name.
  for (const name of Object.keys(NAMED)) {
    if (JSON.stringify(out[`${name}Input`]) === JSON.stringify(out[name])) delete out[`${name}Input`];
  }
  return out;
}

function schemaRef(schema: z.ZodType, io: "input" | "output", comps: Json): Json {
  const name = nameOf(schema);
  if (name) return { $ref: REF(io === "input" && `${name}Input` in comps ? `${name}Input` : name) };
  const { $schema: _s, ...rest } = z.toJSONSchema(schema, { io, unrepresentable: "any" }) as Json;
  return rest;
}

function parameters(r: Route): Json[] {
  const list: Json[] = [];
  for (const [where, schema] of [
    ["path", r.params],
    ["query", r.query],
  ] as const) {
    if (!schema) continue;
    for (const [name, field] of Object.entries(schema.shape)) {
      const f = field as z.ZodType;
      const { $schema: _s, ...json } = z.toJSONSchema(f, { io: "input", unrepresentable: "any" }) as Json;
      list.push({
        name,
        in: where,
        required: where === "path" || !f.safeParse(undefined).success,
        schema: json,
      });
    }
  }
  return list;
}

function operation(r: Route, comps: Json): Json {
  const op: Json = {
    operationId: `${r.method.toLowerCase()}${r.path.replace(/[/:]+(\w)/g, (_m, c: string) => c.toUpperCase()).replace(/\W/g, "")}`,
    summary: r.summary,
    tags: [r.tag],
    parameters: parameters(r),
    responses: {} as Json,
  };
  if (r.description) op.description = r.description;
  if (r.auth === "token" || r.auth === "admin") op.security = [{ apiToken: [] }];
  else if (r.auth === "host") op.security = [{ hostCredential: [] }];
  else op.security = [];
  if (r.kind === "websocket") op["x-websocket"] = true;
  const content: Json = {};
  if (r.body) content["application/json"] = { schema: schemaRef(r.body, "input", comps) };
  for (const type of r.binaryBody?.contentTypes ?? []) {
    content[type] = {
      schema: {
        type: "string",
        format: "binary",
        contentMediaType: type,
        description: r.binaryBody?.description,
      },
    };
  }
  if (Object.keys(content).length > 0) op.requestBody = { required: !!r.binaryBody, content };
  const responses = op.responses as Json;
  for (const res of r.responses) {
    const type = res.contentType ?? "application/json";
    responses[String(res.status)] = {
      description: res.description,
      ...(res.status === 204 || res.status === 101
        ? {}
        : {
            content: {
              [type]: { schema: res.schema ? schemaRef(res.schema, "output", comps) : { type: "string" } },
            },
          }),
    };
  }
  responses.default = {
    description: "An error: {error:{code,message,details?}}",
    content: { "application/json": { schema: { $ref: REF("ErrorResponse") } } },
  };
  return op;
}

export function buildOpenApi(routes: readonly Route[], serverUrl: string): Json {
  const comps = components();
  const paths: Record<string, Json> = {};
  for (const r of routes) {
    const path = r.path.replace(/:(\w+)/g, "{$1}");
    paths[path] ??= {};
    (paths[path] as Json)[r.method.toLowerCase()] = operation(r, comps);
  }
  return {
    openapi: "3.1.0",
    info: {
      title: "denv control plane",
      version: "1",
      description: "The REST API of denv-cp. docs/reference/api.md describes every route with an example.",
    },
    servers: [{ url: serverUrl }],
    paths,
    components: {
      schemas: comps,
      securitySchemes: {
        apiToken: { type: "http", scheme: "bearer", description: "An API token (denv_...)" },
        hostCredential: { type: "http", scheme: "bearer", description: "A host credential (denvh_...)" },
      },
    },
  };
}
