import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import http from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ControlPlaneMessages } from "@denv/spec";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestCp, type TestCp } from "../testing/harness.js";
import { safeRelative } from "./web-assets.js";

/**
 * The dashboard's files at `/`: what a browser gets, what a deep link gets, that the API under
 * /v1 is never answered with a file, and that no request path reads outside the build folder.
 */

/** A GET with the path exactly as given (fetch and URL would resolve `..` before sending). */
function rawGet(url: string, path: string): Promise<{ status: number; type: string; body: string }> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const req = http.request({ host: hostname, port, path, method: "GET" }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () =>
        resolve({
          status: res.statusCode ?? 0,
          type: String(res.headers["content-type"] ?? ""),
          body: Buffer.concat(chunks).toString(),
        }),
      );
    });
    req.on("error", reject);
    req.end();
  });
}

describe("the dashboard's files", () => {
  let t: TestCp;
  let root: string;
  const INDEX = '<!doctype html><div id="root"></div><script type="module" src="/assets/app-1.js"></script>';
  const SECRET = "outside-the-dist-folder";

  beforeAll(async () => {
    root = mkdtempSync(join(tmpdir(), "denv-web-test-"));
    const dist = join(root, "dist");
    mkdirSync(join(dist, "assets"), { recursive: true });
    writeFileSync(join(dist, "index.html"), INDEX);
    writeFileSync(join(dist, "assets", "app-1.js"), "console.log('app')");
    writeFileSync(join(dist, "assets", "app-1.css"), "body{}");
    writeFileSync(join(dist, "favicon.svg"), "<svg/>");
    // Beside the build folder, and a link from inside it to outside.
    writeFileSync(join(root, "secret.txt"), SECRET);
    symlinkSync(join(root, "secret.txt"), join(dist, "assets", "link.txt"));
    t = await startTestCp({ webDir: dist });
  });
  afterAll(async () => {
    await t.close();
    rmSync(root, { recursive: true, force: true });
  });

  it("serves the page, its assets with their content types, and index.html for deep links", async () => {
    const page = await fetch(`${t.url}/`);
    expect(page.status).toBe(200);
    expect(page.headers.get("content-type")).toBe("text/html; charset=utf-8");
    expect(page.headers.get("cache-control")).toBe("no-cache");
    expect(page.headers.get("content-security-policy")).toContain("connect-src 'self'");
    expect(page.headers.get("x-content-type-options")).toBe("nosniff");
    expect(await page.text()).toBe(INDEX);

    const js = await fetch(`${t.url}/assets/app-1.js`);
    expect(js.headers.get("content-type")).toBe("text/javascript; charset=utf-8");
    expect(js.headers.get("cache-control")).toContain("immutable");
    expect(await js.text()).toBe("console.log('app')");
    expect((await fetch(`${t.url}/assets/app-1.css`)).headers.get("content-type")).toBe(
      "text/css; charset=utf-8",
    );
    expect((await fetch(`${t.url}/favicon.svg`)).headers.get("content-type")).toBe("image/svg+xml");

    for (const deep of ["/deployments/dep_123", "/projects/shop/environments", "/hosts?x=1", "/sandboxes/"]) {
      const r = await fetch(`${t.url}${deep}`);
      expect(r.status, deep).toBe(200);
      expect(r.headers.get("content-type"), deep).toBe("text/html; charset=utf-8");
      expect(await r.text(), deep).toBe(INDEX);
    }
    // A missing file is a 404, not the page (a stale asset link must not load HTML as a script).
    const missing = await fetch(`${t.url}/assets/app-0.js`);
    expect(missing.status).toBe(404);
    expect(((await missing.json()) as { error: unknown }).error).toEqual({
      code: "not_found",
      message: ControlPlaneMessages.noDashboardFile("/assets/app-0.js"),
    });
  });

  it("never shadows the API: /v1 and the system routes answer as before", async () => {
    const unknown = await t.anon.get("/v1/no-such-route");
    expect(unknown.status).toBe(404);
    expect(unknown.body).toEqual({ error: { code: "not_found", message: "no route GET /v1/no-such-route" } });
    expect((await t.anon.get("/v1/projects")).status).toBe(401);
    expect((await t.admin.get("/v1/projects")).body).toEqual({ projects: [] });
    expect((await t.anon.get("/healthz")).body).toEqual({ ok: true });
    expect((await t.anon.get("/v1/openapi.json")).headers.get("content-type")).toContain("application/json");
    // Only GET and HEAD reach the files; a POST to a page path is the API's 404.
    const post = await t.anon.post("/deployments/x", {});
    expect(post.status).toBe(404);
    expect(post.body.error.message).toBe("no route POST /deployments/x");
  });

  it("attack: no request path reads a file outside the build folder", async () => {
    for (const path of [
      "/../secret.txt",
      "/assets/../../secret.txt",
      "/%2e%2e/secret.txt",
      "/assets/%2e%2e%2f%2e%2e%2fsecret.txt",
      "/assets/..%2f..%2fsecret.txt",
      "/..%5csecret.txt",
      "/assets/link.txt",
      "/%00index.html",
      "/%E0%A4%A.txt",
      "//etc/passwd",
      "/assets/./app-1.js",
    ]) {
      const r = await rawGet(t.url, path);
      expect(r.body, path).not.toContain(SECRET);
      expect(r.body, path).not.toContain("root:");
      // Either refused outright or answered with the page itself, never a file from elsewhere.
      expect([200, 400, 404], path).toContain(r.status);
      if (r.status === 200) expect(r.body, path).toBe(INDEX);
    }
    expect(safeRelative("/a/../b")).toBeUndefined();
    expect(safeRelative("/a/%2e%2e/b")).toBeUndefined();
    expect(safeRelative("/a\\b")).toBeUndefined();
    expect(safeRelative("/assets/app-1.js")).toBe("assets/app-1.js");
  });

  it("a control plane whose dashboard is not built says so at /", async () => {
    const empty = mkdtempSync(join(tmpdir(), "denv-web-none-"));
    const other = await startTestCp({ webDir: join(empty, "dist") });
    try {
      const r = await fetch(`${other.url}/deployments/x`);
      expect(r.status).toBe(404);
      expect(((await r.json()) as { error: { message: string } }).error.message).toBe(
        ControlPlaneMessages.dashboardNotBuilt,
      );
      expect((await other.anon.get("/healthz")).status).toBe(200);
    } finally {
      await other.close();
      rmSync(empty, { recursive: true, force: true });
    }
  });
});
