import { mkdtemp, readdir, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ControlPlaneMessages, INITIAL_WINDOW } from "@denv/spec";
import { afterEach, describe, expect, it } from "vitest";
import type { FakeHost } from "../testing/fake-host.js";
import { startTestCp, type TestCp, waitFor } from "../testing/harness.js";

/** Deployments survive a cp restart: resumed when their host answers, failed cleanly when it does not. */
describe("a control plane restart in the middle of a deployment", () => {
  let t: TestCp | undefined;
  let dir: string | undefined;
  afterEach(async () => {
    await t?.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  async function setup(resumeTimeoutMs: number): Promise<{ t: TestCp; h: FakeHost }> {
    dir = await mkdtemp(join(tmpdir(), "denv-restart-"));
    t = await startTestCp({ dataDir: dir, resumeTimeoutMs });
    const h = await t.host({ name: "h1" });
    await t.admin.post("/v1/projects", { name: "shop" });
    return { t, h };
  }

  const deployment = (t: TestCp, id: string) => t.admin.get(`/v1/deployments/${id}`).then((r) => r.body);

  it("the host reconnects and answers the re-sent command id: the deployment finishes", async () => {
    const { t, h } = await setup(30_000);
    h.hold = (c) => c.kind === "env.deploy";
    const source = Buffer.from("project tar ".repeat(50_000));
    const started = await t.admin.upload("POST", "/v1/projects/shop/deploy", source);
    const id = started.body.id as string;
    const first = await h.command("env.deploy");
    expect(first.id).toBe(`${id}.deploy`);

    await t.restart();
    await h.until(() => !h.connected);
    expect(await deployment(t, id)).toMatchObject({ status: "running" });
    // The spooled source waits for the resumed run.
    expect(await readdir(join(t.dataDir, "spool"))).toEqual([`${id}.tar`]);

    h.hold = () => false;
    await h.connect(t.url);
    const done = await waitFor(async () => {
      const d = await deployment(t, id);
      return d.status !== "running" && d;
    });
    expect(done.status).toBe("succeeded");
    const resent = h.commands.filter((c) => c.id === `${id}.deploy`);
    expect(resent.length).toBe(2);
    expect(h.sources.get(`${id}.deploy`)?.bytes).toBe(source.length);
    expect((await t.admin.get("/v1/environments/shop/alpha")).body).toMatchObject({
      status: "running",
      version: "shop@v1",
    });
    const log = (await t.admin.get(`/v1/deployments/${id}/log`)).body as string;
    expect(log).toContain("resumed after a control plane restart");
    expect(await readdir(join(t.dataDir, "spool"))).toEqual([]);
  });

  it("an upload cut by the restart is interrupted on the host; the deploy goes again under a new id", async () => {
    const { t, h } = await setup(30_000);
    h.grantDelayMs = 60_000;
    const source = Buffer.alloc(4 * INITIAL_WINDOW, 5);
    const started = await t.admin.upload("POST", "/v1/projects/shop/deploy", source);
    const id = started.body.id as string;
    await h.until(() => [...h.readers.values()].some((r) => r.bytes >= INITIAL_WINDOW));
    await t.restart();
    await h.until(() => !h.connected && h.journal.has(`${id}.deploy`));
    expect(h.journal.get(`${id}.deploy`)).toMatchObject({ ok: false, error: { code: "interrupted" } });
    h.grantDelayMs = 0;
    await h.connect(t.url);
    const done = await waitFor(async () => {
      const d = await deployment(t, id);
      return d.status !== "running" && d;
    });
    expect(done.status).toBe("succeeded");
    expect(h.commands.filter((c) => c.id === `${id}.deploy`)).toHaveLength(2);
    expect(h.sources.get(`${id}.deploy.r1`)?.bytes).toBe(source.length);
    const log = (await t.admin.get(`/v1/deployments/${id}/log`)).body as string;
    expect(log).toContain("env.deploy was interrupted on h1");
  });

  it("a command the host finished while the cp was down is answered from the host's journal, not run again", async () => {
    const { t, h } = await setup(30_000);
    h.hold = (c) => c.kind === "env.snapshot";
    const started = await t.admin.upload("POST", "/v1/projects/shop/deploy", Buffer.from("tar"));
    const id = started.body.id as string;
    const snap = await h.command("env.snapshot");
    await t.restart();
    await h.until(() => !h.connected);
    h.hold = () => false;
    h.release(snap.id);
    await h.until(() => h.journal.has(snap.id));
    expect(h.versions.size).toBe(1);
    await h.connect(t.url);
    const done = await waitFor(async () => {
      const d = await deployment(t, id);
      return d.status !== "running" && d;
    });
    expect(done.status).toBe("succeeded");
    expect(h.commands.filter((c) => c.id === snap.id)).toHaveLength(2);
    expect(h.versions.size).toBe(1);
    expect(done.result.version).toBe("shop@v1");
  });

  it("the host reconnects but never answers: failed cleanly after the resume timeout", async () => {
    const { t, h } = await setup(1_500);
    h.hold = (c) => c.kind === "env.deploy";
    const started = await t.admin.upload("POST", "/v1/projects/shop/deploy", Buffer.from("tar"));
    const id = started.body.id as string;
    await h.command("env.deploy");
    await t.restart();
    await h.until(() => !h.connected);
    await h.connect(t.url);
    const done = await waitFor(async () => {
      const d = await deployment(t, id);
      return d.status !== "running" && d;
    });
    expect(done.status).toBe("failed");
    expect(done.error).toEqual({ code: "timeout", message: ControlPlaneMessages.resumeTimedOut("h1", 2) });
    expect(done.phases.find((p: { name: string }) => p.name === "validate").status).toBe("failed");
    expect(done.phases.find((p: { name: string }) => p.name === "switch").status).toBe("skipped");
    // The attempt's host environment is cleaned up, and the environment that never came up is gone.
    expect(h.commands.some((c) => c.id === `${id}.cleanup`)).toBe(true);
    expect((await t.admin.get("/v1/environments/shop/alpha")).status).toBe(404);
  });

  it("the host never comes back: failed after the resume timeout, never stuck running", async () => {
    const { t, h } = await setup(1_000);
    h.hold = (c) => c.kind === "env.deploy";
    const started = await t.admin.upload("POST", "/v1/projects/shop/deploy", Buffer.from("tar"));
    await h.command("env.deploy");
    await h.close();
    await t.restart();
    const done = await waitFor(async () => {
      const d = await deployment(t, started.body.id);
      return d.status !== "running" && d;
    });
    expect(done).toMatchObject({ status: "failed", error: { code: "timeout" } });
  });
});
