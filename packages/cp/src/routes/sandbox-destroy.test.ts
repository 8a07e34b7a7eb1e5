import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { PlacementMessages, SandboxMessages } from "@denv/spec";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { openStore } from "../store/open-store.js";
import type { FakeHost } from "../testing/fake-host.js";
import { deployed, startTestCp, type TestCp, upgradeStatus, waitFor } from "../testing/harness.js";

/**
 * DELETE /v1/sandboxes/... answers once the sandbox is unreachable, not once its host removed
 * it: sealed (exec, files, logs, probe and tunnels refused; calls in flight cancelled), marked
 * `destroying`, its room held until the host said it is gone; the removal survives a restart.
 */

const GiB = 1024 ** 3;
const isDestroy = (c: { kind: string }) => c.kind === "env.destroy";

describe("a sandbox's destroy answers before its host finished", () => {
  let t: TestCp;
  let h: FakeHost;
  beforeAll(async () => {
    // Room for alpha and one 1 GiB sandbox, caps committed exactly; a sweep every second.
    t = await startTestCp({ placementOvercommitMemory: 1, sandboxSweepMs: 1000 });
    h = await t.host({ name: "h1", capacity: { cpus: 8, memory_bytes: 2 * GiB, disk_free_bytes: GiB } });
    await deployed(t, "shop");
  });
  afterAll(() => t.close());
  afterEach(() => {
    h.hold = () => false;
  });

  it("202 destroying while the host still removes it: every call refused, the room still held", async () => {
    const r = await t.admin.post("/v1/sandboxes", { project: "shop", name: "ep1" });
    expect(r.status, JSON.stringify(r.body)).toBe(201);
    h.hold = isDestroy;
    const del = await t.admin.del("/v1/sandboxes/shop/ep1");
    expect(del.status).toBe(202);
    expect(del.body).toEqual({ id: "shop/ep1", status: "destroying", deployment: expect.any(String) });
    const cmd = await h.command("env.destroy");
    expect(cmd.id).toBe(`${del.body.deployment}.destroy`);

    const refused = { code: "conflict", message: SandboxMessages.destroying("shop/ep1") };
    const calls = [
      t.admin.post("/v1/environments/shop/ep1/exec", { cmd: ["true"] }),
      t.admin.upload("PUT", "/v1/environments/shop/ep1/files?path=/workspace", Buffer.alloc(1024)),
      t.admin.get("/v1/environments/shop/ep1/files?path=/workspace"),
      t.admin.get("/v1/environments/shop/ep1/logs"),
      t.admin.get("/v1/environments/shop/ep1/probe"),
    ];
    for (const c of await Promise.all(calls)) {
      expect(c.status).toBe(409);
      expect(c.body.error).toEqual(refused);
    }
    const auth = { authorization: `Bearer ${t.cp.adminToken}` };
    for (const path of ["exec/stream", "connect?service=app&port=8080"]) {
      const u = await upgradeStatus(`${t.url}/v1/environments/shop/ep1/${path}`, auth);
      expect(u.status, path).toBe(409);
      expect(JSON.parse(u.body).error, path).toEqual(refused);
    }
    const env = (await t.admin.get("/v1/environments/shop/ep1")).body;
    expect(env).toMatchObject({ status: "destroying", reachable: false });
    // A second DELETE joins the same destroy.
    const again = await t.admin.del("/v1/sandboxes/shop/ep1");
    expect(again.body).toEqual(del.body);

    // Its room is not free until the host said it is gone.
    const full = await t.admin.post("/v1/sandboxes", { project: "shop", name: "ep2" });
    expect(full.status).toBe(409);
    expect(full.body.error.message).toBe(
      PlacementMessages.noHostWithRoom(
        "local",
        "1 GiB memory, 1 cpus, 512 pids",
        `h1: ${PlacementMessages.notEnough("memory", "1 GiB", "0 B", "2 GiB")}`,
        "--placement-overcommit-memory",
      ),
    );

    h.hold = () => false;
    h.release(cmd.id);
    const done = await waitFor(async () => {
      const d = (await t.admin.get(`/v1/deployments/${del.body.deployment}`)).body;
      return d.status !== "running" && d.status !== "queued" && d;
    });
    expect(done).toMatchObject({ kind: "destroy", status: "succeeded" });
    expect((await t.admin.get("/v1/environments/shop/ep1")).status).toBe(404);
    expect([...h.environments.keys()].some((k) => k.startsWith("shop/ep1-"))).toBe(false);
    const fits = await t.admin.post("/v1/sandboxes", { project: "shop", name: "ep2" });
    expect(fits.status, JSON.stringify(fits.body)).toBe(201);
    expect((await t.admin.del("/v1/sandboxes/shop/ep2?wait=true")).body).toMatchObject({
      status: "destroyed",
    });
  });

  it("an exec in flight when the destroy is asked is cancelled on the host", async () => {
    const r = await t.admin.post("/v1/sandboxes", { project: "shop", name: "ep3" });
    expect(r.status).toBe(201);
    h.hold = (c) => c.kind === "env.exec" || isDestroy(c);
    const exec = t.admin.post("/v1/environments/shop/ep3/exec", { cmd: ["sleep", "1000"] });
    const sent = await h.until(() => h.commands.find((c) => c.kind === "env.exec"));
    const del = await t.admin.del("/v1/sandboxes/shop/ep3");
    expect(del.status).toBe(202);
    expect(h.cancels).toContain(sent.id);
    const answered = await exec;
    expect(answered.status).not.toBe(200);
    h.hold = () => false;
    const held = await h.until(() =>
      h.commands.find((c) => isDestroy(c) && c.id.startsWith(del.body.deployment)),
    );
    h.release(held.id);
    await waitFor(async () => (await t.admin.get("/v1/environments/shop/ep3")).status === 404);
  });

  it("a destroy that fails on its host leaves it destroying; the sweep destroys it", async () => {
    const r = await t.admin.post("/v1/sandboxes", { project: "shop", name: "ep4" });
    expect(r.status).toBe(201);
    h.failures.set("env.destroy", { code: "internal", message: "the engine said no" });
    const del = await t.admin.del("/v1/sandboxes/shop/ep4?wait=true");
    h.hold = isDestroy;
    expect(del.status).toBe(500);
    expect(del.body.error.message).toBe("the engine said no");
    expect((await t.admin.get("/v1/environments/shop/ep4")).body).toMatchObject({ status: "destroying" });
    const exec = await t.admin.post("/v1/environments/shop/ep4/exec", { cmd: ["true"] });
    expect(exec.body.error.message).toBe(SandboxMessages.destroying("shop/ep4"));
    // The sweep's next pass sends it again, under a new deployment.
    const retry = await h.until(
      () =>
        h.commands.filter(
          (c) =>
            isDestroy(c) &&
            String((c.payload as { environment: string }).environment).startsWith("shop/ep4-"),
        )[1],
      5_000,
    );
    h.release(retry.id);
    await waitFor(async () => (await t.admin.get("/v1/environments/shop/ep4")).status === 404);
    expect([...h.environments.keys()].some((k) => k.startsWith("shop/ep4-"))).toBe(false);
  });
});

describe("a sandbox destroy across a control plane restart", () => {
  let t: TestCp | undefined;
  let dir: string | undefined;
  afterEach(async () => {
    await t?.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("answered, then the cp restarts before the host answered: the destroy resumes and finishes", async () => {
    dir = await mkdtemp(join(tmpdir(), "denv-destroy-"));
    t = await startTestCp({ dataDir: dir, resumeTimeoutMs: 30_000 });
    const h = await t.host({ name: "h1" });
    await deployed(t, "shop");
    expect((await t.admin.post("/v1/sandboxes", { project: "shop", name: "ep" })).status).toBe(201);
    h.hold = isDestroy;
    const del = await t.admin.del("/v1/sandboxes/shop/ep");
    expect(del.status).toBe(202);
    await h.command("env.destroy");
    await t.restart();
    await h.until(() => !h.connected);
    // Still sealed after the restart, before its host is back.
    const exec = await t.admin.post("/v1/environments/shop/ep/exec", { cmd: ["true"] });
    expect(exec.body.error.message).toBe(SandboxMessages.destroying("shop/ep"));
    h.hold = () => false;
    await h.connect(t.url);
    const done = await waitFor(async () => {
      const d = (await t?.admin.get(`/v1/deployments/${del.body.deployment}`))?.body;
      return d?.status !== "running" && d?.status !== "queued" && d;
    });
    expect(done.status).toBe("succeeded");
    expect((await t.admin.get("/v1/environments/shop/ep")).status).toBe(404);
    expect([...h.environments.keys()].filter((k) => k.startsWith("shop/ep-"))).toEqual([]);
    // One destroy deployment: the resumed one, not a second started by the sweep.
    const destroys = (await t.admin.get("/v1/projects/shop/deployments")).body.deployments.filter(
      (d: { kind: string; environment: string }) => d.kind === "destroy" && d.environment === "shop/ep",
    );
    expect(destroys).toHaveLength(1);
  });

  it("marked destroying but no deployment yet (a crash in between): the next start destroys it", async () => {
    dir = await mkdtemp(join(tmpdir(), "denv-destroy-"));
    t = await startTestCp({ dataDir: dir });
    const h = await t.host({ name: "h1" });
    await deployed(t, "shop");
    expect((await t.admin.post("/v1/sandboxes", { project: "shop", name: "ep" })).status).toBe(201);
    await t.cp.close();
    // What a crash between the mark and the destroy deployment leaves in the store.
    const store = await openStore(join(dir, "denv.db"));
    const rec = await store.getEnvironment("shop/ep");
    expect(rec).toBeDefined();
    if (rec) await store.putEnvironment({ ...rec, status: "destroying" });
    await store.close();
    await t.restart({ sandboxSweepMs: 200 });
    await h.until(() => !h.connected);
    await h.connect(t.url);
    await waitFor(async () => (await t?.admin.get("/v1/environments/shop/ep"))?.status === 404);
    expect([...h.environments.keys()].filter((k) => k.startsWith("shop/ep-"))).toEqual([]);
  });
});
