import { existsSync, mkdirSync, readdirSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import {
  CreateApiToken,
  CreateProject,
  CreateSandbox,
  DenvError,
  type Deployment,
  ExecRequest,
  ForkRequest,
  RollbackRequest,
} from "@denv/spec";
import { extractTar } from "../tar/tar-extract.js";
import { packTar } from "../tar/tar-pack.js";
import { checkExec, once, runFake } from "./fake-exec.js";
import { hostRoutes } from "./fake-host-routes.js";
import { type Ctx, parse, type Route, readJson, readTar, requireScope, route, send } from "./fake-http.js";
import type { FakeState, LogEvent } from "./fake-state.js";

const now = () => new Date().toISOString();

/** The answer of a route that starts a deployment: 202, or 200 and the final state with ?wait=true. */
async function answerDeployment(ctx: Ctx, d: Deployment): Promise<void> {
  if (ctx.url.searchParams.get("wait") === "true") send(ctx.res, 200, await ctx.state.finished(d.id));
  else send(ctx.res, 202, d);
}

/** The folder that stands for a service's file system. */
function serviceRoot(filesRoot: string, envId: string, service: string): string {
  const dir = path.join(filesRoot, ...envId.split("/"), service);
  mkdirSync(dir, { recursive: true });
  return dir;
}

function inRoot(root: string, p: string | null): string {
  if (p === null || !p.startsWith("/"))
    throw new DenvError("invalid_request", `path '${p ?? ""}' must be absolute`);
  const abs = path.join(root, path.posix.normalize(p));
  if (!abs.startsWith(root)) throw new DenvError("invalid_request", `path '${p}' climbs out`);
  return abs;
}

export function routes(state: FakeState, filesRoot: string): Route[] {
  const envOf = (ctx: Ctx) => {
    const [project = "", name = ""] = ctx.params;
    requireScope(ctx.token, project);
    return state.environment(`${project}/${name}`);
  };
  const r = route;

  return [
    r("GET", "/healthz", "none", (ctx) => send(ctx.res, 200, { ok: true })),
    r("GET", "/v1/whoami", "token", (ctx) => send(ctx.res, 200, ctx.token)),

    r("POST", "/v1/tokens", "admin", async (ctx) => {
      const body = parse(CreateApiToken, await readJson(ctx.req));
      const token = `tok-${state.nextId("t")}`;
      const info = { id: state.nextId("tok"), ...body };
      state.tokens.set(token, info);
      send(ctx.res, 201, { ...info, token, created_at: now() });
    }),
    r("GET", "/v1/tokens", "admin", (ctx) => {
      const tokens = [...state.tokens.values()].map((t) => ({ ...t, created_at: now() }));
      send(ctx.res, 200, { tokens });
    }),

    r("POST", "/v1/projects", "admin", async (ctx) => {
      const body = parse(CreateProject, await readJson(ctx.req));
      if (state.projects.has(body.name)) throw new DenvError("conflict", `project '${body.name}' exists`);
      const project = { ...body, created_at: now() };
      state.projects.set(body.name, project);
      send(ctx.res, 201, project);
    }),
    r("GET", "/v1/projects", "token", (ctx) => {
      const all = [...state.projects.values()];
      send(ctx.res, 200, {
        projects: all.filter((p) => ctx.token.project === undefined || p.name === ctx.token.project),
      });
    }),
    r("GET", "/v1/projects/:p", "token", (ctx) => {
      requireScope(ctx.token, ctx.params[0] ?? "");
      send(ctx.res, 200, state.project(ctx.params[0] ?? ""));
    }),
    r("DELETE", "/v1/projects/:p", "admin", (ctx) => {
      const name = ctx.params[0] ?? "";
      state.project(name);
      const live = [...state.environments.values()].some(
        (e) => e.project === name && e.status !== "destroyed",
      );
      if (live) throw new DenvError("conflict", `project '${name}' has environments; destroy them first`);
      state.projects.delete(name);
      send(ctx.res, 204);
    }),

    r("POST", "/v1/projects/:p/deploy", "token", async (ctx) => {
      const project = ctx.params[0] ?? "";
      requireScope(ctx.token, project);
      state.project(project);
      const envName = ctx.url.searchParams.get("environment") ?? "alpha";
      state.lastPlacement = ctx.url.searchParams.get("placement") ?? undefined;
      state.lastTarget = ctx.url.searchParams.get("target") ?? undefined;
      if ((ctx.req.headers["content-type"] ?? "").startsWith("application/json")) {
        const body = await readJson(ctx.req);
        if (typeof body.git_ref !== "string") throw new DenvError("invalid_request", "git_ref is missing");
        state.lastUpload = [];
      } else {
        const dir = await mkdtemp(path.join(os.tmpdir(), "denv-fake-upload-"));
        try {
          const tar = await readTar(ctx.req);
          await extractTar(Readable.from([tar]), dir);
          state.lastUpload = listFiles(dir);
        } finally {
          await rm(dir, { recursive: true, force: true });
        }
      }
      const id = `${project}/${envName}`;
      const d = state.startDeployment("deploy", id, () => {
        const env = state.environments.get(id) ?? state.newEnvironment(project, envName, undefined);
        env.status = "running";
        env.version = state.newVersion(env).id;
        return env;
      });
      await answerDeployment(ctx, d);
    }),
    r("GET", "/v1/projects/:p/deployments", "token", (ctx) => {
      requireScope(ctx.token, ctx.params[0] ?? "");
      const list = [...state.deployments.values()]
        .map((d) => d.deployment)
        .filter((d) => d.project === ctx.params[0]);
      send(ctx.res, 200, { deployments: list.reverse() });
    }),
    r("GET", "/v1/deployments/:id", "token", (ctx) => {
      const d = state.deployment(ctx.params[0] ?? "").deployment;
      requireScope(ctx.token, d.project);
      send(ctx.res, 200, d);
    }),
    r("GET", "/v1/deployments/:id/log", "token", (ctx) => {
      const record = state.deployment(ctx.params[0] ?? "");
      requireScope(ctx.token, record.deployment.project);
      ctx.res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
      ctx.res.write(": replay\n\n");
      // As the control plane: events numbered from 1 (SSE id), Last-Event-ID skips the past.
      const after = state.sseIds ? Number(ctx.req.headers["last-event-id"] ?? 0) || 0 : 0;
      const write = (e: { event: string; data: unknown }) => {
        const seq = record.events.indexOf(e as LogEvent) + 1;
        if (e.event !== "done" && seq <= after) return;
        ctx.res.write(
          `${e.event === "done" || !state.sseIds ? "" : `id: ${seq}\n`}event: ${e.event}\ndata: ${JSON.stringify(e.data)}\n\n`,
        );
        if (e.event === "done") {
          record.listeners.delete(write);
          ctx.res.end();
        }
      };
      for (const e of record.events) write(e);
      if (!ctx.res.writableEnded) {
        record.listeners.add(write);
        ctx.res.on("close", () => record.listeners.delete(write));
      }
    }),

    r("GET", "/v1/projects/:p/environments", "token", (ctx) => {
      requireScope(ctx.token, ctx.params[0] ?? "");
      state.project(ctx.params[0] ?? "");
      const list = [...state.environments.values()].filter(
        (e) => e.project === ctx.params[0] && e.status !== "destroyed",
      );
      send(ctx.res, 200, { environments: list });
    }),
    r("GET", "/v1/environments/:p/:e", "token", (ctx) => send(ctx.res, 200, envOf(ctx))),
    r("POST", "/v1/environments/:p/:e/fork", "token", async (ctx) => {
      const env = envOf(ctx);
      const body = parse(ForkRequest, await readJson(ctx.req));
      const name = body.name ?? state.nextId("fork").replace("_", "-");
      if (state.environments.get(`${env.project}/${name}`)?.status === "running") {
        throw new DenvError("conflict", `environment '${env.project}/${name}' exists`);
      }
      const version = body.version ?? env.version;
      const d = state.startDeployment("fork", `${env.project}/${name}`, () => {
        const fork = state.newEnvironment(env.project, name, version);
        fork.status = "running";
        if (version !== undefined) fork.parent_version = version;
        return fork;
      });
      await answerDeployment(ctx, d);
    }),
    r("POST", "/v1/environments/:p/:e/snapshot", "token", async (ctx) => {
      const env = envOf(ctx);
      await answerDeployment(
        ctx,
        state.startDeployment("snapshot", env.id, () => state.newVersion(env)),
      );
    }),
    r("POST", "/v1/environments/:p/:e/rollback", "token", async (ctx) => {
      const env = envOf(ctx);
      const body = parse(RollbackRequest, await readJson(ctx.req));
      const id = body.version.includes("@")
        ? body.version
        : `${env.project}@v${body.version.replace(/^v/, "")}`;
      if (!state.versions.has(id)) throw new DenvError("not_found", `version '${id}' does not exist`);
      await answerDeployment(
        ctx,
        state.startDeployment("rollback", env.id, () => {
          env.version = id;
          return env;
        }),
      );
    }),
    ...(["stop", "start"] as const).map((kind) =>
      r("POST", `/v1/environments/:p/:e/${kind}`, "token", async (ctx) => {
        const env = envOf(ctx);
        await answerDeployment(
          ctx,
          state.startDeployment(kind, env.id, () => {
            env.status = kind === "stop" ? "stopped" : "running";
            return env;
          }),
        );
      }),
    ),
    r("DELETE", "/v1/environments/:p/:e", "token", async (ctx) => {
      const env = envOf(ctx);
      await answerDeployment(
        ctx,
        state.startDeployment("destroy", env.id, () => {
          env.status = "destroyed";
          return env;
        }),
      );
    }),
    r("POST", "/v1/environments/:p/:e/verify", "token", async (ctx) => {
      const env = envOf(ctx);
      const d = state.startDeployment("verify", env.id, () => ({
        status: "graded",
        reward: 0.75,
        rewards: { reward: 0.75, tests_passed: 3 },
        log: "3 of 4 tests passed\n",
        version: env.version ?? `${env.project}@v1`,
        fork: `${env.project}/verify-1`,
        evidence: { verifier_uid: 1001 },
      }));
      await answerDeployment(ctx, d);
    }),

    r("POST", "/v1/environments/:p/:e/exec", "token", async (ctx) => {
      const env = envOf(ctx);
      const req = parse(ExecRequest, await readJson(ctx.req));
      checkExec(env, req, state.project(env.project).kind);
      const out = { stdout: [] as Buffer[], stderr: [] as Buffer[] };
      const result = await runFake(env, req, once(Buffer.from(req.stdin ?? "", "base64")), (s, b) =>
        out[s].push(b),
      );
      send(ctx.res, 200, {
        ...result,
        stdout: Buffer.concat(out.stdout).toString("utf8"),
        stderr: Buffer.concat(out.stderr).toString("utf8"),
      });
    }),
    r("PUT", "/v1/environments/:p/:e/files", "token", async (ctx) => {
      const env = envOf(ctx);
      const service = ctx.url.searchParams.get("service") ?? env.agent?.service ?? "main";
      const dest = inRoot(serviceRoot(filesRoot, env.id, service), ctx.url.searchParams.get("path"));
      const tar = await readTar(ctx.req);
      send(ctx.res, 200, await extractTar(Readable.from([tar]), dest));
    }),
    r("GET", "/v1/environments/:p/:e/files", "token", async (ctx) => {
      const env = envOf(ctx);
      const service = ctx.url.searchParams.get("service") ?? env.agent?.service ?? "main";
      const p = ctx.url.searchParams.get("path");
      const abs = inRoot(serviceRoot(filesRoot, env.id, service), p);
      if (!existsSync(abs)) throw new DenvError("not_found", `'${p}' does not exist in service '${service}'`);
      ctx.res.writeHead(200, { "content-type": "application/x-tar" });
      await pipeline(packTar(abs, { name: path.posix.basename(p ?? "") || "." }), ctx.res);
    }),
    r("GET", "/v1/environments/:p/:e/logs", "token", (ctx) => {
      const env = envOf(ctx);
      const service = ctx.url.searchParams.get("service") ?? "all";
      const tail = Number(ctx.url.searchParams.get("tail") ?? "0");
      const lines = [1, 2, 3].map((i) => `${env.id} ${service} line ${i}\n`);
      send(ctx.res, 200, { stdout: (tail > 0 ? lines.slice(-tail) : lines).join(""), stderr: "" });
    }),
    r("GET", "/v1/environments/:p/:e/probe", "token", (ctx) => {
      envOf(ctx);
      send(ctx.res, 200, { ok: true, findings: [] });
    }),

    r("GET", "/v1/projects/:p/versions", "token", (ctx) => {
      requireScope(ctx.token, ctx.params[0] ?? "");
      send(ctx.res, 200, {
        versions: [...state.versions.values()].filter((v) => v.project === ctx.params[0]),
      });
    }),
    r("GET", "/v1/versions/:p/:n", "token", (ctx) => {
      requireScope(ctx.token, ctx.params[0] ?? "");
      const v = state.versions.get(`${ctx.params[0]}@v${ctx.params[1]}`);
      if (v === undefined)
        throw new DenvError("not_found", `version '${ctx.params[0]}@v${ctx.params[1]}' does not exist`);
      send(ctx.res, 200, v);
    }),
    r("DELETE", "/v1/versions/:p/:n", "token", (ctx) => {
      requireScope(ctx.token, ctx.params[0] ?? "");
      const id = `${ctx.params[0]}@v${ctx.params[1]}`;
      if (!state.versions.has(id)) throw new DenvError("not_found", `version '${id}' does not exist`);
      const users = [...state.environments.values()].filter(
        (e) => e.version === id && e.status !== "destroyed",
      );
      if (users.length > 0)
        throw new DenvError("conflict", `version '${id}' runs in ${users.map((e) => e.id).join(", ")}`);
      state.versions.delete(id);
      send(ctx.res, 204);
    }),

    r("POST", "/v1/sandboxes", "token", async (ctx) => {
      const body = parse(CreateSandbox, await readJson(ctx.req));
      requireScope(ctx.token, body.project);
      state.project(body.project);
      const one = (name: string | undefined) => {
        const env = state.newEnvironment(
          body.project,
          name ?? state.nextId("sb").replace("_", "-"),
          body.version,
          true,
        );
        env.status = "running";
        env.expires_at = new Date(Date.now() + body.ttl_sec * 1000).toISOString();
        return env;
      };
      if (body.count === undefined) return send(ctx.res, 201, one(body.name));
      const reason = "the fake's only host";
      const need = { memory_bytes: 1024 ** 3, cpus: 1, pids: 512 };
      const sandboxes = Array.from({ length: body.count }, (_, i) => ({
        ...one(body.name && `${body.name}-${i + 1}`),
        placement: {
          host: "host-1",
          reason,
          need,
          labels: {},
          candidates: [{ host: "host-1", environments: i }],
        },
      }));
      send(ctx.res, 201, { sandboxes });
    }),
    r("GET", "/v1/sandboxes", "token", (ctx) => {
      const list = [...state.environments.values()].filter((e) => e.sandbox && e.status !== "destroyed");
      send(ctx.res, 200, {
        sandboxes: list.filter((e) => ctx.token.project === undefined || e.project === ctx.token.project),
      });
    }),
    r("DELETE", "/v1/sandboxes/:p/:e", "token", (ctx) => {
      const e = envOf(ctx);
      e.status = "destroyed";
      const wait = ctx.url.searchParams.get("wait") === "true";
      send(ctx.res, wait ? 200 : 202, {
        id: e.id,
        status: wait ? "destroyed" : "destroying",
        deployment: `dep_destroy_${e.name}`,
      });
    }),

    ...hostRoutes(state),
  ];
}

function listFiles(dir: string, prefix = ""): string[] {
  const out: string[] = [];
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const rel = prefix === "" ? entry.name : `${prefix}/${entry.name}`;
    if (entry.isDirectory()) out.push(...listFiles(path.join(dir, entry.name), rel));
    else out.push(rel);
  }
  return out.sort();
}
