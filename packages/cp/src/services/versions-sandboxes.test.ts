import { ControlPlaneMessages } from "@denv/spec";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FakeHost } from "../testing/fake-host.js";
import { deployed, startTestCp, type TestCp, waitFor } from "../testing/harness.js";

describe("versions, retention and sandboxes", () => {
  let t: TestCp;
  let h: FakeHost;
  const numbers = async () =>
    (await t.admin.get("/v1/projects/shop/versions")).body.versions.map((v: { number: number }) => v.number);

  beforeAll(async () => {
    t = await startTestCp({ retainVersions: 2, sandboxSweepMs: 100 });
    h = await t.host({ name: "h1" });
    await deployed(t, "shop");
  });
  afterAll(() => t.close());

  it("retention keeps the newest N and every version an environment runs from", async () => {
    await t.admin.post("/v1/environments/shop/alpha/snapshot?wait=true");
    await t.admin.post("/v1/environments/shop/alpha/snapshot?wait=true");
    // v1 is what alpha runs: kept although it is the oldest.
    expect(await numbers()).toEqual([3, 2, 1]);
    await deployed(t, "shop");
    expect(await numbers()).toEqual([4, 3]);
    expect([...h.versions].sort()).toEqual(["shop@v3", "shop@v4"]);
    const deletes = h.commands.filter((c) => c.kind === "version.delete").map((c) => c.payload.version);
    expect(deletes.sort()).toEqual(["shop@v1", "shop@v2"]);
  });

  it("a version in use cannot be deleted; an unused one is deleted on its host", async () => {
    const inUse = await t.admin.del("/v1/versions/shop/4");
    expect(inUse.status).toBe(409);
    expect(inUse.body.error.message).toBe(ControlPlaneMessages.versionInUse("shop@v4", ["shop/alpha"]));
    expect((await t.admin.del("/v1/versions/shop/3")).status).toBe(204);
    expect(h.versions.has("shop@v3")).toBe(false);
    expect((await t.admin.get("/v1/versions/shop/3")).status).toBe(404);
    expect((await t.admin.del("/v1/versions/shop/3")).status).toBe(404);
  });

  it("a sandbox is a ready fork with a TTL; the sweeper destroys it when the TTL ends", async () => {
    const r = await t.admin.post("/v1/sandboxes", { project: "shop", ttl_sec: 1 });
    expect(r.status).toBe(201);
    expect(r.body).toMatchObject({
      project: "shop",
      sandbox: true,
      status: "running",
      version: "shop@v4",
      host_id: "h1",
    });
    expect(r.body.name).toMatch(/^sbx-/);
    expect(Date.parse(r.body.expires_at) - Date.now()).toBeLessThanOrEqual(1000);
    expect((await t.admin.get("/v1/sandboxes")).body.sandboxes.map((s: { id: string }) => s.id)).toEqual([
      r.body.id,
    ]);
    const hostEnv = `shop/${(await h.command("env.fork")).payload.name}`;
    expect(h.environments.has(hostEnv)).toBe(true);
    await waitFor(async () => (await t.admin.get("/v1/sandboxes")).body.sandboxes.length === 0, 5_000);
    expect(h.environments.has(hostEnv)).toBe(false);
    expect((await t.admin.get(`/v1/environments/${r.body.id}`)).status).toBe(404);
  });

  it("a sandbox is deleted on request; only sandboxes are", async () => {
    const r = await t.admin.post("/v1/sandboxes", { project: "shop", name: "episode-1", version: "4" });
    expect(r.body.id).toBe("shop/episode-1");
    expect((await t.admin.del("/v1/sandboxes/shop/episode-1?wait=true")).status).toBe(200);
    expect((await t.admin.get("/v1/environments/shop/episode-1")).status).toBe(404);
    expect((await t.admin.del("/v1/sandboxes/shop/alpha")).status).toBe(404);
  });

  it("a sandbox that cannot start answers the host's error and leaves nothing behind", async () => {
    h.failures.set("env.fork", { code: "egress_leak", message: "refused: the egress probe found a way out" });
    const r = await t.admin.post("/v1/sandboxes", { project: "shop", name: "leaky" });
    expect(r.status).toBe(412);
    expect(r.body.error).toEqual({
      code: "egress_leak",
      message: "refused: the egress probe found a way out",
    });
    expect((await t.admin.get("/v1/environments/shop/leaky")).status).toBe(404);
  });

  it("a project with environments cannot be deleted; without them its versions go too", async () => {
    const busy = await t.admin.del("/v1/projects/shop");
    expect(busy.status).toBe(409);
    expect(busy.body.error.message).toBe(ControlPlaneMessages.projectHasEnvironments("shop", 1));
    await t.admin.del("/v1/environments/shop/alpha?wait=true");
    expect((await t.admin.del("/v1/projects/shop")).status).toBe(204);
    expect(h.versions.size).toBe(0);
    expect((await t.admin.get("/v1/projects/shop")).status).toBe(404);
  });
});
