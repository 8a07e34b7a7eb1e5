import { mkdtemp, readFile, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { startTestCp, type TestCp } from "./testing/harness.js";

describe("the control plane process", () => {
  let t: TestCp | undefined;
  let dir: string | undefined;
  afterEach(async () => {
    await t?.close();
    t = undefined;
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("writes the admin token once (mode 0600) and keeps it across restarts", async () => {
    dir = await mkdtemp(join(tmpdir(), "denv-cp-"));
    t = await startTestCp({ dataDir: dir });
    const file = join(dir, "admin-token");
    const token = (await readFile(file, "utf8")).trim();
    expect(token).toMatch(/^denv_[A-Za-z0-9_-]{43}$/);
    expect(t.cp.adminToken).toBe(token);
    expect((await stat(file)).mode & 0o777).toBe(0o600);
    await t.restart();
    expect(t.cp.adminToken).toBe(token);
    expect((await readFile(file, "utf8")).trim()).toBe(token);
    expect((await t.admin.get("/v1/whoami")).body).toMatchObject({ name: "admin", role: "admin" });
    // Only the hash is stored (in the database file or its write-ahead log).
    for (const f of ["denv.db", "denv.db-wal"]) {
      const bytes = await readFile(join(dir, f)).catch(() => Buffer.alloc(0));
      expect(bytes.includes(Buffer.from(token)), f).toBe(false);
    }
  });

  it("adopts an admin token file written before the database existed", async () => {
    dir = await mkdtemp(join(tmpdir(), "denv-cp-"));
    const file = join(dir, "elsewhere", "token");
    t = await startTestCp({ dataDir: dir, adminTokenFile: file });
    const first = t.cp.adminToken;
    await t.close();
    await rm(join(dir, "denv.db"));
    t = await startTestCp({ dataDir: dir, adminTokenFile: file });
    expect(t.cp.adminToken).toBe(first);
    expect((await t.admin.get("/v1/whoami")).status).toBe(200);
  });

  it("a revoked admin token stays revoked while the database has another admin", async () => {
    dir = await mkdtemp(join(tmpdir(), "denv-cp-"));
    t = await startTestCp({ dataDir: dir });
    const second = (await t.admin.post("/v1/tokens", { name: "ops", role: "admin" })).body.token as string;
    const me = (await t.admin.get("/v1/whoami")).body.id as string;
    expect((await t.admin.as(second).del(`/v1/tokens/${me}`)).status).toBe(204);
    await t.restart();
    expect((await t.admin.get("/v1/whoami")).status).toBe(401);
    expect((await t.admin.as(second).get("/v1/whoami")).status).toBe(200);
  });

  it("has a local target from the first start, health and metrics", async () => {
    t = await startTestCp();
    expect((await t.admin.get("/v1/targets")).body.targets).toEqual([
      expect.objectContaining({
        name: "local",
        kind: "hosts",
        capabilities: expect.objectContaining({ fork: true }),
      }),
    ]);
    expect((await t.anon.get("/healthz")).body).toEqual({ ok: true });
    await t.anon.get("/v1/projects");
    const m = await t.anon.get("/metrics");
    expect(m.headers.get("content-type")).toContain("text/plain");
    const text = m.body as string;
    expect(text).toContain('denv_http_requests_total{method="GET",route="/v1/projects",status="401"} 1');
    expect(text).toMatch(
      /denv_http_request_duration_seconds_bucket\{method="GET",route="\/healthz",status="200",le="\+Inf"\} 1/,
    );
    expect(text).toContain("denv_hosts_online 0");
    expect(text).toContain('denv_deployments{status="running"} 0');
    expect(text).toMatch(/denv_process_memory_bytes\{kind="rss"\} \d+/);
  });

  it("answers errors in one shape, unknown routes included", async () => {
    t = await startTestCp();
    expect(await t.admin.get("/v1/nope")).toMatchObject({
      status: 404,
      body: { error: { code: "not_found" } },
    });
    const bad = await t.admin.post("/v1/projects", { name: "Bad Name" });
    expect(bad.status).toBe(400);
    expect(bad.body.error.message).toContain("invalid project name 'Bad Name'");
    const dup = await t.admin.post("/v1/projects", { name: "shop" });
    expect(dup.status).toBe(201);
    expect((await t.admin.post("/v1/projects", { name: "shop" })).body.error).toEqual({
      code: "conflict",
      message: "project shop exists",
    });
    const notJson = await t.admin.call("POST", "/v1/projects", undefined, {
      "content-type": "application/json",
    });
    expect(notJson.status).toBe(400);
    expect((await t.anon.get("/v1/projects")).body.error).toEqual({
      code: "unauthorized",
      message: "missing API token: send 'Authorization: Bearer <token>'",
    });
  });

  describe("CORS", () => {
    const preflight = (url: string, origin: string) =>
      fetch(`${url}/v1/projects`, {
        method: "OPTIONS",
        headers: {
          origin,
          "access-control-request-method": "POST",
          "access-control-request-headers": "authorization",
        },
      });

    it("is off by default: no CORS headers, no preflight route", async () => {
      t = await startTestCp();
      const r = await fetch(`${t.url}/healthz`, { headers: { origin: "https://app.example" } });
      expect(r.headers.get("access-control-allow-origin")).toBeNull();
      expect((await preflight(t.url, "https://app.example")).status).toBe(404);
    });

    it("allows the configured origins only, on answers and preflights", async () => {
      t = await startTestCp({ corsOrigins: "https://app.example" });
      const ok = await fetch(`${t.url}/healthz`, { headers: { origin: "https://app.example" } });
      expect(ok.headers.get("access-control-allow-origin")).toBe("https://app.example");
      expect(ok.headers.get("vary")).toContain("Origin");
      const pre = await preflight(t.url, "https://app.example");
      expect(pre.status).toBe(204);
      expect(pre.headers.get("access-control-allow-methods")).toContain("POST");
      expect(pre.headers.get("access-control-allow-headers")).toContain("authorization");
      const other = await fetch(`${t.url}/healthz`, { headers: { origin: "https://evil.example" } });
      expect(other.headers.get("access-control-allow-origin")).toBeNull();
      const otherPre = await preflight(t.url, "https://evil.example");
      expect(otherPre.headers.get("access-control-allow-origin")).toBeNull();
      expect(otherPre.headers.get("access-control-allow-methods")).toBeNull();
      // Errors carry the header too, so a browser can read them.
      const err = await fetch(`${t.url}/v1/projects`, { headers: { origin: "https://app.example" } });
      expect(err.status).toBe(401);
      expect(err.headers.get("access-control-allow-origin")).toBe("https://app.example");
    });
  });
});
