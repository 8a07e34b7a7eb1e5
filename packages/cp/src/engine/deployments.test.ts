import { createHash } from "node:crypto";
import { gzipSync } from "node:zlib";
import { ControlPlaneMessages, Phases } from "@denv/spec";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FakeHost } from "../testing/fake-host.js";
import { startTestCp, type TestCp, waitFor } from "../testing/harness.js";

type Phase = {
  name: string;
  status: string;
  evidence?: Record<string, unknown>;
  duration_ms?: number;
  started_at?: string;
};

const sha = (b: Buffer) => createHash("sha256").update(b).digest("hex");
const phase = (d: { phases: Phase[] }, name: string) => d.phases.find((p) => p.name === name) as Phase;

describe("deployments through phases", () => {
  let t: TestCp;
  let h: FakeHost;
  const source = Buffer.from("a tar of the project, opaque to the cp ".repeat(3000));

  beforeAll(async () => {
    t = await startTestCp();
    h = await t.host({ name: "h1" });
    await t.admin.post("/v1/projects", { name: "shop" });
  });
  afterAll(() => t.close());

  it("deploy: streams the source, builds on the host, snapshots v1, switches alpha", async () => {
    const started = await t.admin.upload("POST", "/v1/projects/shop/deploy", source);
    expect(started.status).toBe(202);
    expect(started.body).toMatchObject({ kind: "deploy", project: "shop", environment: "shop/alpha" });
    expect(phase(started.body, "resolve source")).toMatchObject({
      status: "succeeded",
      evidence: { upload_bytes: source.length, tar_bytes: source.length, sha256: sha(source), gzip: false },
    });
    const d = await waitFor(async () => {
      const r = await t.admin.get(`/v1/deployments/${started.body.id}`);
      return r.body.status === "succeeded" && r.body;
    });
    expect(d.phases.map((p: Phase) => p.name)).toEqual(Phases.deploy);
    for (const p of d.phases as Phase[]) {
      // A smoke verify runs only where the verifier asks for it (smoke-verify.test.ts).
      if (p.name === "smoke verify") {
        expect(p.status).toBe("skipped");
        continue;
      }
      expect(p.status, p.name).toBe("succeeded");
      expect(p.duration_ms, p.name).toBeGreaterThanOrEqual(0);
    }
    expect(phase(d, "place").evidence).toMatchObject({
      host: "h1",
      reason: "the only online host of the target",
    });
    expect(Object.keys(phase(d, "build").evidence?.digests as object)).toEqual(["api", "redis"]);
    expect(phase(d, "snapshot").evidence).toMatchObject({ version: "shop@v1", method: "btrfs" });
    expect(phase(d, "switch").evidence).toMatchObject({
      environment: "shop/alpha",
      host: "h1",
      version: "shop@v1",
    });
    expect(d.host_id).toBe("h1");
    expect(d.result).toMatchObject({
      id: "shop/alpha",
      status: "running",
      version: "shop@v1",
      host_id: "h1",
    });

    const deployCmd = await h.command("env.deploy");
    expect(deployCmd.id).toBe(`${d.id}.deploy`);
    expect(deployCmd.payload).toMatchObject({ project: "shop", compose_file: "compose.yaml" });
    expect(deployCmd.payload.environment).toMatch(/^alpha-[a-z0-9]{6}$/);
    expect(h.sources.get(deployCmd.id)).toEqual({ bytes: source.length, sha256: sha(source) });
    expect((await h.command("env.snapshot")).payload).toEqual({
      environment: `shop/${deployCmd.payload.environment}`,
      number: 1,
    });

    const env = await t.admin.get("/v1/environments/shop/alpha");
    expect(env.body).toMatchObject({ status: "running", version: "shop@v1", host_id: "h1", sandbox: false });
    expect(env.body.agent).toEqual({ service: "api", user: "1000", workdir: "/work" });
    const versions = await t.admin.get("/v1/projects/shop/versions");
    expect(versions.body.versions).toEqual([
      expect.objectContaining({ id: "shop@v1", number: 1, host_id: "h1", source_environment: "shop/alpha" }),
    ]);
  });

  it("a gzip upload reaches the host as the plain tar; the previous host environment is destroyed after the switch", async () => {
    const first = (await h.command("env.deploy", 0)).payload.environment as string;
    const r = await t.admin.upload(
      "POST",
      "/v1/projects/shop/deploy?wait=true",
      gzipSync(source),
      "application/gzip",
    );
    expect(r.status).toBe(200);
    expect(r.body.status).toBe("succeeded");
    expect(phase(r.body, "resolve source").evidence).toMatchObject({
      gzip: true,
      tar_bytes: source.length,
      sha256: sha(gzipSync(source)),
    });
    const second = await h.command("env.deploy", 1);
    expect(h.sources.get(second.id)).toEqual({ bytes: source.length, sha256: sha(source) });
    expect(phase(r.body, "switch").evidence?.previous).toMatchObject({
      host: "h1",
      host_env: first,
      version: "shop@v1",
    });
    const destroyed = await h.command("env.destroy");
    expect(destroyed.payload).toEqual({ environment: `shop/${first}` });
    expect(h.environments.has(`shop/${first}`)).toBe(false);
    expect((await t.admin.get("/v1/environments/shop/alpha")).body.version).toBe("shop@v2");
  });

  it("fork: restores the version on the host that holds it as a new environment", async () => {
    const r = await t.admin.post("/v1/environments/shop/alpha/fork?wait=true", { name: "f1" });
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ kind: "fork", environment: "shop/f1", status: "succeeded" });
    expect(r.body.phases.map((p: Phase) => [p.name, p.status])).toEqual(
      // The host holds the version: nothing to move.
      Phases.fork.map((n) => [n, n === "transfer" ? "skipped" : "succeeded"]),
    );
    expect(phase(r.body, "place").evidence).toMatchObject({
      host: "h1",
      reason: "holds shop@v2 (snapshot locality)",
    });
    expect(r.body.result).toMatchObject({
      id: "shop/f1",
      parent_version: "shop@v2",
      version: "shop@v2",
      status: "running",
    });
    const cmd = await h.command("env.fork");
    expect(cmd.payload).toMatchObject({ version: "shop@v2" });
    expect(cmd.payload.name).toMatch(/^f1-[a-z0-9]{6}$/);
    const dup = await t.admin.post("/v1/environments/shop/alpha/fork", { name: "f1" });
    expect(dup.status).toBe(409);
  });

  it("snapshot: freeze, capture, thaw on the host, then the cp records the next version", async () => {
    const r = await t.admin.post("/v1/environments/shop/f1/snapshot?wait=true");
    expect(r.body.status).toBe("succeeded");
    expect(r.body.phases.map((p: Phase) => p.name)).toEqual(Phases.snapshot);
    expect(phase(r.body, "record").evidence).toMatchObject({ version: "shop@v3", host: "h1" });
    expect(r.body.result).toMatchObject({
      id: "shop@v3",
      number: 3,
      source_environment: "shop/f1",
      host_id: "h1",
    });
    expect((await t.admin.get("/v1/versions/shop/3")).body.id).toBe("shop@v3");
  });

  it("rollback: forks the older version into a new host environment and switches to it", async () => {
    const before = await t.admin.get("/v1/environments/shop/alpha");
    const r = await t.admin.post("/v1/environments/shop/alpha/rollback?wait=true", { version: "shop@v1" });
    expect(r.body.status).toBe("succeeded");
    expect(r.body.phases.map((p: Phase) => p.name)).toEqual(Phases.rollback);
    const after = await t.admin.get("/v1/environments/shop/alpha");
    expect(after.body).toMatchObject({ version: "shop@v1", parent_version: "shop@v1", status: "running" });
    const forks = h.commands.filter((c) => c.kind === "env.fork");
    expect(forks.at(-1)?.payload.version).toBe("shop@v1");
    expect(phase(r.body, "switch").evidence?.previous).toMatchObject({ version: "shop@v2" });
    expect(before.body.services[0].container_id).not.toBe(after.body.services[0].container_id);
  });

  it("verify, stop, start and destroy", async () => {
    const v = await t.admin.post("/v1/environments/shop/alpha/verify?wait=true");
    expect(v.body.status).toBe("succeeded");
    expect(v.body.phases.map((p: Phase) => [p.name, p.status])).toEqual(
      Phases.verify.map((n) => [n, "succeeded"]),
    );
    expect(v.body.result).toMatchObject({ status: "graded", reward: 1 });

    const stop = await t.admin.post("/v1/environments/shop/f1/stop?wait=true");
    expect(stop.body.result.status).toBe("stopped");
    expect((await t.admin.get("/v1/environments/shop/f1")).body.status).toBe("stopped");
    const start = await t.admin.post("/v1/environments/shop/f1/start?wait=true");
    expect(start.body.phases.map((p: Phase) => [p.name, p.status])).toEqual(
      Phases.start.map((n) => [n, "succeeded"]),
    );
    expect((await t.admin.get("/v1/environments/shop/f1")).body.status).toBe("running");

    const hostEnv = `shop/${(await h.command("env.fork", 0)).payload.name}`;
    const destroy = await t.admin.del("/v1/environments/shop/f1?wait=true");
    expect(destroy.body).toMatchObject({
      kind: "destroy",
      status: "succeeded",
      result: { id: "shop/f1", status: "destroyed" },
    });
    expect(h.environments.has(hostEnv)).toBe(false);
    expect((await t.admin.get("/v1/environments/shop/f1")).status).toBe(404);
  });

  it("a failed step fails the deployment, keeps the environment on its version, and cleans up", async () => {
    const before = (await t.admin.get("/v1/environments/shop/alpha")).body;
    h.failures.set("env.snapshot", { code: "docker", message: "commit failed: no space left on device" });
    const r = await t.admin.upload("POST", "/v1/projects/shop/deploy?wait=true", source);
    expect(r.status).toBe(200);
    expect(r.body.status).toBe("failed");
    expect(r.body.error).toEqual({ code: "docker", message: "commit failed: no space left on device" });
    expect(phase(r.body, "snapshot")).toMatchObject({
      status: "failed",
      evidence: { error: "commit failed: no space left on device" },
    });
    expect(phase(r.body, "switch").status).toBe("skipped");
    expect(phase(r.body, "probe").status).toBe("succeeded");
    const after = (await t.admin.get("/v1/environments/shop/alpha")).body;
    expect(after).toEqual(before);
    const attempt = h.commands.filter((c) => c.kind === "env.deploy").at(-1)?.payload.environment as string;
    const cleanup = h.commands.find((c) => c.id === `${r.body.id}.cleanup`);
    expect(cleanup?.payload).toEqual({ environment: `shop/${attempt}` });
    expect(h.environments.has(`shop/${attempt}`)).toBe(false);
  });

  it("a host refusing the build fails at that phase; a first environment that never came up is removed", async () => {
    h.failures.set("env.deploy", {
      code: "invalid_compose",
      message: "service 'api': 'privileged' is refused",
    });
    const r = await t.admin.upload("POST", "/v1/projects/shop/deploy?environment=beta&wait=true", source);
    expect(r.body.status).toBe("failed");
    expect(r.body.error.code).toBe("invalid_compose");
    expect(phase(r.body, "validate").status).toBe("failed");
    expect(phase(r.body, "build").status).toBe("skipped");
    expect(h.commands.some((c) => c.id === `${r.body.id}.cleanup`)).toBe(true);
    expect((await t.admin.get("/v1/environments/shop/beta")).status).toBe(404);
  });

  it("with no online host the deployment fails at place with what to do", async () => {
    const t2 = await startTestCp();
    try {
      await t2.admin.post("/v1/projects", { name: "solo" });
      const r = await t2.admin.upload("POST", "/v1/projects/solo/deploy?wait=true", source);
      expect(r.body.status).toBe("failed");
      expect(r.body.error.message).toBe(ControlPlaneMessages.noOnlineHost("local"));
      expect(phase(r.body, "place").status).toBe("failed");
      expect((await t2.admin.get("/v1/projects/solo/environments")).body.environments).toEqual([]);
    } finally {
      await t2.close();
    }
  });

  it("deployments are listed newest first; git refs and empty uploads are refused", async () => {
    const list = (await t.admin.get("/v1/projects/shop/deployments")).body.deployments;
    expect(list.length).toBeGreaterThan(5);
    expect(list.map((d: { created_at: string }) => d.created_at)).toEqual(
      [...list.map((d: { created_at: string }) => d.created_at)].sort().reverse(),
    );
    const git = await t.admin.post("/v1/projects/shop/deploy", { git_ref: "main" });
    expect(git.status).toBe(400);
    const empty = await t.admin.upload("POST", "/v1/projects/shop/deploy", Buffer.alloc(0));
    expect(empty.status).toBe(400);
  });
  it("records the client's own source hash as evidence, and ignores one that is not a sha256", async () => {
    const key = "a".repeat(64);
    const withKey = await t.admin.call("POST", "/v1/projects/shop/deploy?environment=hashed", source, {
      "content-type": "application/x-tar",
      "x-denv-source-sha256": `sha256:${key}`,
    });
    expect(phase(withKey.body, "resolve source").evidence?.source_sha256).toBe(`sha256:${key}`);
    const bogus = await t.admin.call("POST", "/v1/projects/shop/deploy?environment=bogus", source, {
      "content-type": "application/x-tar",
      "x-denv-source-sha256": "not-a-hash",
    });
    expect(phase(bogus.body, "resolve source").evidence).toBeDefined();
    expect(phase(bogus.body, "resolve source").evidence?.source_sha256).toBeUndefined();
    for (const d of [withKey.body.id, bogus.body.id]) {
      await waitFor(async () =>
        ["succeeded", "failed"].includes((await t.admin.get(`/v1/deployments/${d}`)).body.status),
      );
    }
  });
});
