import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FakeGithub } from "../testing/fake-github.js";
import { type Api, deployed, startTestCp, type TestCp, upgradeStatus } from "../testing/harness.js";
import { HetznerTestServer } from "../testing/hetzner-server.js";

/**
 * The authorization matrix: every route of /v1/openapi.json against no token, a bad token, a
 * revoked API token, a host credential sent as a bearer token, an admin, an unscoped member, a
 * member scoped to the project (shop), and a member scoped to another project. Scoped tokens get
 * 404 (never 403) for other projects' resources. A host credential opens the host stream and
 * nothing else; public routes do not read the Authorization header at all.
 */

type Who = "none" | "bad" | "revoked" | "host" | "admin" | "member" | "scoped" | "other";
const WHO: Who[] = ["none", "bad", "revoked", "host", "other", "member", "scoped", "admin"];
type Access = "public" | "token" | "scoped" | "admin" | "host";

interface Req {
  path: string;
  body?: unknown;
  tar?: boolean;
  ws?: boolean;
}

interface Case {
  access: Access;
  ok: number;
  req: (who: Who) => Req | Promise<Req>;
}

/** The error code of each refusal status (docs/reference/api.md, "Errors"). */
const REFUSAL_CODE: Record<number, string> = { 401: "unauthorized", 403: "forbidden", 404: "not_found" };

function expected(access: Access, who: Who, ok: number): number {
  if (access === "public") return ok;
  if (access === "host") return who === "host" ? ok : 401;
  if (who === "none" || who === "bad" || who === "revoked" || who === "host") return 401;
  if (access === "admin") return who === "admin" ? ok : 403;
  if (access === "scoped" && who === "other") return 404;
  return ok;
}

describe("authorization matrix", () => {
  let t: TestCp;
  const api = {} as Record<Who, Api>;
  let depId: string;
  let hz: HetznerTestServer;
  let gh: FakeGithub;
  let ghDir: string;

  beforeAll(async () => {
    gh = await FakeGithub.start();
    await gh.createRepository("acme/shop");
    ghDir = await mkdtemp(join(tmpdir(), "denv-authz-"));
    t = await startTestCp({
      // Any file serves as the denvd bundle for GET /v1/install/*: this one.
      denvdBundle: fileURLToPath(import.meta.url),
      githubAppId: gh.appId,
      githubPrivateKeyFile: await gh.writePrivateKey(ghDir),
      githubWebhookSecret: gh.webhookSecret,
      githubApiUrl: gh.url,
      githubWebUrl: gh.url,
    });
    hz = await new HetznerTestServer("x").start();
    await t.host({ name: "h1" });
    await deployed(t, "shop");
    await deployed(t, "other");
    await t.admin.post("/v1/projects/shop/github", { repository: "acme/shop" });
    // An episode with one step, for the log and replay routes.
    await t.admin.post("/v1/environments/shop/alpha/fork?wait=true", { name: "ep" });
    await t.admin.post("/v1/environments/shop/ep/exec", { cmd: ["echo", "hi"] });
    depId = (await t.admin.get("/v1/projects/shop/deployments")).body.deployments[0].id;
    const token = async (body: Record<string, unknown>) =>
      (await t.admin.post("/v1/tokens", body)).body.token as string;
    api.admin = t.admin;
    api.none = t.anon;
    api.bad = t.admin.as("denv_not-a-token");
    api.member = t.admin.as(await token({ name: "member" }));
    api.scoped = t.admin.as(await token({ name: "shop-ci", project: "shop" }));
    api.other = t.admin.as(await token({ name: "other-ci", project: "other" }));
    const revoked = (await t.admin.post("/v1/tokens", { name: "revoked" })).body;
    await t.admin.del(`/v1/tokens/${revoked.id}`);
    api.revoked = t.admin.as(revoked.token);
    // A host that joined but is not connected: its credential opens a stream of its own.
    api.host = t.admin.as((await joinHost()).credential);
  });
  afterAll(async () => {
    await t.close();
    await hz.close();
    await gh.close();
    await rm(ghDir, { recursive: true, force: true });
  });

  const admin = () => t.admin;
  /** A host joined through the API (never connected), for the routes that act on one. */
  const joinHost = async (name?: string) => {
    const token = (await admin().post("/v1/targets/local/join-tokens", {})).body.token;
    return (await admin().post("/v1/hosts/join", { token, ...(name ? { name } : {}) })).body as {
      host_id: string;
      credential: string;
    };
  };
  const CASES: Record<string, Case> = {
    "GET /healthz": { access: "public", ok: 200, req: () => ({ path: "/healthz" }) },
    "GET /metrics": { access: "public", ok: 200, req: () => ({ path: "/metrics" }) },
    "GET /v1/openapi.json": { access: "public", ok: 200, req: () => ({ path: "/v1/openapi.json" }) },
    "GET /v1/whoami": { access: "token", ok: 200, req: () => ({ path: "/v1/whoami" }) },
    "POST /v1/tokens": {
      access: "admin",
      ok: 201,
      req: (w) => ({ path: "/v1/tokens", body: { name: `t-${w}` } }),
    },
    "GET /v1/tokens": { access: "admin", ok: 200, req: () => ({ path: "/v1/tokens" }) },
    "DELETE /v1/tokens/{id}": {
      access: "admin",
      ok: 204,
      req: async () => ({
        path: `/v1/tokens/${(await admin().post("/v1/tokens", { name: "doomed" })).body.id}`,
      }),
    },
    "POST /v1/projects": {
      access: "admin",
      ok: 201,
      req: (w) => ({ path: "/v1/projects", body: { name: `p-${w}` } }),
    },
    "GET /v1/projects": { access: "token", ok: 200, req: () => ({ path: "/v1/projects" }) },
    "GET /v1/projects/{project}": { access: "scoped", ok: 200, req: () => ({ path: "/v1/projects/shop" }) },
    "DELETE /v1/projects/{project}": {
      access: "admin",
      ok: 204,
      req: async (w) => {
        await admin().post("/v1/projects", { name: `del-${w}` });
        return { path: `/v1/projects/del-${w}` };
      },
    },
    "POST /v1/projects/{project}/deploy": {
      access: "scoped",
      ok: 200,
      req: (w) => ({ path: `/v1/projects/shop/deploy?environment=d-${w}&wait=true`, tar: true }),
    },
    "GET /v1/projects/{project}/deployments": {
      access: "scoped",
      ok: 200,
      req: () => ({ path: "/v1/projects/shop/deployments" }),
    },
    "GET /v1/deployments/{id}": {
      access: "scoped",
      ok: 200,
      req: () => ({ path: `/v1/deployments/${depId}` }),
    },
    "GET /v1/deployments/{id}/log": {
      access: "scoped",
      ok: 200,
      req: () => ({ path: `/v1/deployments/${depId}/log` }),
    },
    "GET /v1/projects/{project}/environments": {
      access: "scoped",
      ok: 200,
      req: () => ({ path: "/v1/projects/shop/environments" }),
    },
    "GET /v1/environments/{project}/{env}": {
      access: "scoped",
      ok: 200,
      req: () => ({ path: "/v1/environments/shop/alpha" }),
    },
    "POST /v1/environments/{project}/{env}/fork": {
      access: "scoped",
      ok: 200,
      req: (w) => ({ path: "/v1/environments/shop/alpha/fork?wait=true", body: { name: `f-${w}` } }),
    },
    "POST /v1/environments/{project}/{env}/rollback": {
      access: "scoped",
      ok: 200,
      req: () => ({ path: "/v1/environments/shop/alpha/rollback?wait=true", body: { version: "1" } }),
    },
    "POST /v1/environments/{project}/{env}/snapshot": {
      access: "scoped",
      ok: 200,
      req: () => ({ path: "/v1/environments/shop/alpha/snapshot?wait=true" }),
    },
    "POST /v1/environments/{project}/{env}/verify": {
      access: "scoped",
      ok: 200,
      req: () => ({ path: "/v1/environments/shop/alpha/verify?wait=true" }),
    },
    "POST /v1/environments/{project}/{env}/stop": {
      access: "scoped",
      ok: 200,
      req: (w) => ({ path: `/v1/environments/shop/f-${w}/stop?wait=true` }),
    },
    "POST /v1/environments/{project}/{env}/start": {
      access: "scoped",
      ok: 200,
      req: (w) => ({ path: `/v1/environments/shop/f-${w}/start?wait=true` }),
    },
    "DELETE /v1/environments/{project}/{env}": {
      access: "scoped",
      ok: 200,
      req: (w) => ({ path: `/v1/environments/shop/f-${w}?wait=true` }),
    },
    "GET /v1/environments/{project}/{env}/logs": {
      access: "scoped",
      ok: 200,
      req: () => ({ path: "/v1/environments/shop/alpha/logs" }),
    },
    "GET /v1/environments/{project}/{env}/probe": {
      access: "scoped",
      ok: 200,
      req: () => ({ path: "/v1/environments/shop/alpha/probe" }),
    },
    "POST /v1/environments/{project}/{env}/exec": {
      access: "scoped",
      ok: 200,
      req: () => ({ path: "/v1/environments/shop/alpha/exec", body: { cmd: ["echo", "hi"] } }),
    },
    "GET /v1/environments/{project}/{env}/exec/stream": {
      access: "scoped",
      ok: 101,
      req: () => ({ path: "/v1/environments/shop/alpha/exec/stream", ws: true }),
    },
    "PUT /v1/environments/{project}/{env}/files": {
      access: "scoped",
      ok: 200,
      req: () => ({ path: "/v1/environments/shop/alpha/files?path=/work", tar: true }),
    },
    "GET /v1/environments/{project}/{env}/episode": {
      access: "scoped",
      ok: 200,
      req: () => ({ path: "/v1/environments/shop/ep/episode" }),
    },
    "POST /v1/environments/{project}/{env}/replay": {
      access: "scoped",
      ok: 200,
      req: (w) => ({ path: "/v1/environments/shop/ep/replay", body: { name: `r-${w}` } }),
    },
    "GET /v1/environments/{project}/{env}/replays": {
      access: "scoped",
      ok: 200,
      req: () => ({ path: "/v1/environments/shop/ep/replays" }),
    },
    "GET /v1/environments/{project}/{env}/files": {
      access: "scoped",
      ok: 200,
      req: () => ({ path: "/v1/environments/shop/alpha/files?path=/work" }),
    },
    "GET /v1/environments/{project}/{env}/connect": {
      access: "scoped",
      ok: 101,
      req: () => ({ path: "/v1/environments/shop/alpha/connect?service=api&port=80", ws: true }),
    },
    "GET /v1/projects/{project}/versions": {
      access: "scoped",
      ok: 200,
      req: () => ({ path: "/v1/projects/shop/versions" }),
    },
    "GET /v1/versions/{project}/{number}": {
      access: "scoped",
      ok: 200,
      req: () => ({ path: "/v1/versions/shop/1" }),
    },
    "DELETE /v1/versions/{project}/{number}": {
      access: "scoped",
      ok: 204,
      req: async () => {
        const snap = await admin().post("/v1/environments/shop/alpha/snapshot?wait=true");
        return { path: `/v1/versions/shop/${snap.body.result.number}` };
      },
    },
    "POST /v1/sandboxes": {
      access: "scoped",
      ok: 201,
      req: (w) => ({ path: "/v1/sandboxes", body: { project: "shop", name: `s-${w}` } }),
    },
    "GET /v1/sandboxes": { access: "token", ok: 200, req: () => ({ path: "/v1/sandboxes" }) },
    "DELETE /v1/sandboxes/{project}/{env}": {
      access: "scoped",
      ok: 202,
      req: (w) => ({ path: `/v1/sandboxes/shop/s-${w}` }),
    },
    "GET /v1/pools": { access: "token", ok: 200, req: () => ({ path: "/v1/pools" }) },
    "POST /v1/projects/{project}/github": {
      access: "admin",
      ok: 200,
      req: () => ({ path: "/v1/projects/shop/github", body: { repository: "acme/shop" } }),
    },
    "GET /v1/projects/{project}/github": {
      access: "scoped",
      ok: 200,
      req: () => ({ path: "/v1/projects/shop/github" }),
    },
    // Unsigned, it is refused whoever calls: a bearer token never stands in for the signature.
    "POST /v1/github/webhook": {
      access: "public",
      ok: 401,
      req: () => ({ path: "/v1/github/webhook", body: { zen: "hi" } }),
    },
    "GET /v1/projects/{project}/pool": {
      access: "scoped",
      ok: 200,
      req: () => ({ path: "/v1/projects/shop/pool" }),
    },
    "PUT /v1/projects/{project}/pool": {
      access: "admin",
      ok: 200,
      req: () => ({ path: "/v1/projects/shop/pool", body: { size: 0 } }),
    },
    "POST /v1/targets": {
      access: "admin",
      ok: 201,
      req: (w) => ({ path: "/v1/targets", body: { name: `t-${w}`, kind: "hosts" } }),
    },
    "GET /v1/targets": { access: "token", ok: 200, req: () => ({ path: "/v1/targets" }) },
    "GET /v1/targets/kinds": { access: "token", ok: 200, req: () => ({ path: "/v1/targets/kinds" }) },
    "GET /v1/targets/{target}": { access: "admin", ok: 200, req: () => ({ path: "/v1/targets/local" }) },
    "DELETE /v1/targets/{target}": {
      access: "admin",
      ok: 204,
      req: async (w) => {
        await admin().post("/v1/targets", { name: `rm-${w}`, kind: "hosts" });
        return { path: `/v1/targets/rm-${w}` };
      },
    },
    "GET /v1/targets/{target}/machines": {
      access: "admin",
      ok: 200,
      req: async (w) => {
        await admin().post("/v1/targets", {
          name: `m-${w}`,
          kind: "hetzner",
          settings: { base_url: hz.url },
          credentials: { api_token: "x" },
        });
        return { path: `/v1/targets/m-${w}/machines` };
      },
    },
    "POST /v1/targets/{target}/reconcile": {
      access: "admin",
      ok: 204,
      req: async (w) => {
        await admin().post("/v1/targets", {
          name: `r-${w}`,
          kind: "hetzner",
          settings: { base_url: hz.url },
          credentials: { api_token: "x" },
        });
        return { path: `/v1/targets/r-${w}/reconcile` };
      },
    },
    "GET /v1/install/install.sh": {
      access: "public",
      ok: 200,
      req: () => ({ path: "/v1/install/install.sh" }),
    },
    "GET /v1/install/denvd.mjs": {
      access: "public",
      ok: 200,
      req: () => ({ path: "/v1/install/denvd.mjs" }),
    },
    "POST /v1/targets/{target}/join-tokens": {
      access: "admin",
      ok: 201,
      req: () => ({ path: "/v1/targets/local/join-tokens", body: {} }),
    },
    "POST /v1/hosts/join": {
      access: "public",
      ok: 201,
      req: async () => ({
        path: "/v1/hosts/join",
        body: { token: (await admin().post("/v1/targets/local/join-tokens", {})).body.token },
      }),
    },
    "GET /v1/targets/{target}/join-tokens": {
      access: "admin",
      ok: 200,
      req: () => ({ path: "/v1/targets/local/join-tokens" }),
    },
    "DELETE /v1/targets/{target}/join-tokens/{id}": {
      access: "admin",
      ok: 204,
      req: async () => ({
        path: `/v1/targets/local/join-tokens/${(await admin().post("/v1/targets/local/join-tokens", {})).body.id}`,
      }),
    },
    "GET /v1/hosts": { access: "token", ok: 200, req: () => ({ path: "/v1/hosts" }) },
    "POST /v1/hosts/{id}/drain": {
      access: "admin",
      ok: 200,
      req: async (w) => ({ path: `/v1/hosts/${(await joinHost(`drain-${w}`)).host_id}/drain` }),
    },
    "DELETE /v1/hosts/{id}": {
      access: "admin",
      ok: 200,
      req: async (w) => ({ path: `/v1/hosts/${(await joinHost(`rm-${w}`)).host_id}` }),
    },
    "GET /v1/hosts/stream": { access: "host", ok: 101, req: () => ({ path: "/v1/hosts/stream", ws: true }) },
  };

  it("covers every route of the OpenAPI document", async () => {
    const doc = (await t.anon.get("/v1/openapi.json")).body as {
      paths: Record<string, Record<string, unknown>>;
    };
    const routes = Object.entries(doc.paths).flatMap(([p, ops]) =>
      Object.keys(ops).map((m) => `${m.toUpperCase()} ${p}`),
    );
    expect(routes.sort()).toEqual(Object.keys(CASES).sort());
  });

  it("answers each caller as designed, every refusal with the documented code", async () => {
    const outcomes: string[] = [];
    let refused = 0;
    for (const [key, c] of Object.entries(CASES)) {
      const method = key.split(" ")[0] as string;
      for (const who of WHO) {
        const want = expected(c.access, who, c.ok);
        const r = await c.req(who);
        let status: number;
        let body: { error?: { code?: string } } | undefined;
        if (r.ws) {
          const token = api[who].token;
          const u = await upgradeStatus(
            `${t.url}${r.path}`,
            token ? { authorization: `Bearer ${token}` } : {},
          );
          status = u.status;
          body = u.body ? (JSON.parse(u.body) as typeof body) : undefined;
        } else {
          const res = r.tar
            ? await api[who].upload(method, r.path, Buffer.from("tar"))
            : await api[who].call(method, r.path, r.body);
          status = res.status;
          body = res.body;
        }
        if (status !== want) outcomes.push(`${key} as ${who}: ${status}, expected ${want}`);
        else if (want >= 400 && body?.error?.code !== REFUSAL_CODE[want])
          outcomes.push(
            `${key} as ${who}: ${want} with code ${body?.error?.code}, expected ${REFUSAL_CODE[want]}`,
          );
        if (want >= 400) refused++;
      }
    }
    expect(outcomes).toEqual([]);
    // Every route but the public ones and the stream refuses the host credential and the revoked token.
    expect(refused).toBeGreaterThan(Object.keys(CASES).length * 4);
  });

  it("a scoped token sees only its project, and another project's names do not leak", async () => {
    expect((await api.scoped.get("/v1/projects")).body.projects.map((p: { name: string }) => p.name)).toEqual(
      ["shop"],
    );
    const hidden = await api.other.get("/v1/projects/shop");
    const absent = await api.other.get("/v1/projects/nosuch");
    expect(hidden.status).toBe(404);
    expect(hidden.body.error).toEqual({ code: "not_found", message: "project shop not found" });
    expect(absent.body.error.message).toBe("project nosuch not found");
    expect((await api.other.get("/v1/environments/shop/alpha")).body.error.message).toBe(
      "environment shop/alpha not found",
    );
    expect((await api.other.get(`/v1/deployments/${depId}`)).body.error.message).toBe(
      `deployment ${depId} not found`,
    );
    await t.admin.post("/v1/sandboxes", { project: "shop", name: "visible" });
    expect((await api.other.get("/v1/sandboxes")).body.sandboxes).toEqual([]);
    expect((await api.scoped.get("/v1/sandboxes")).body.sandboxes.map((s: { id: string }) => s.id)).toContain(
      "shop/visible",
    );
    expect((await api.other.post("/v1/sandboxes", { project: "shop" })).status).toBe(404);
    expect((await api.scoped.get("/v1/whoami")).body).toMatchObject({
      name: "shop-ci",
      role: "member",
      project: "shop",
    });
  });

  it("a revoked token stops working at once", async () => {
    const created = (await t.admin.post("/v1/tokens", { name: "short-lived" })).body;
    const a = t.admin.as(created.token);
    expect((await a.get("/v1/whoami")).status).toBe(200);
    expect((await t.admin.del(`/v1/tokens/${created.id}`)).status).toBe(204);
    expect((await a.get("/v1/whoami")).status).toBe(401);
    const listed = (await t.admin.get("/v1/tokens")).body.tokens;
    expect(listed.every((x: { token?: string }) => x.token === undefined)).toBe(true);
  });
});
