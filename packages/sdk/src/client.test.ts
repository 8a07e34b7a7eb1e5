import { mkdtemp, rm, writeFile } from "node:fs/promises";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { HOSTS_PAGE, HostMessages } from "@denv/spec";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DenvApiError, DenvClient, DenvClientError, DenvUnreachableError, packTar } from "./index.js";
import { type FakeControlPlane, startFakeControlPlane } from "./testing/fake-control-plane.js";

let fake: FakeControlPlane;

/** A port nobody listens on. */
async function freePort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as net.AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}
let admin: DenvClient;

beforeAll(async () => {
  fake = await startFakeControlPlane();
  admin = new DenvClient({ url: `${fake.url}/`, token: fake.adminToken });
});
/** Folders the tests made, removed at the end. */
const made: string[] = [];
afterAll(async () => {
  await fake?.close();
  for (const dir of made) await rm(dir, { recursive: true, force: true });
});

describe("DenvClient routes", () => {
  it("parses resources and list envelopes with the spec schemas", async () => {
    expect(await admin.health()).toEqual({ ok: true });
    expect(await admin.whoami()).toMatchObject({ id: "tok_admin", role: "admin" });
    const project = await admin.createProject({ name: "routes" });
    expect(project).toMatchObject({ name: "routes", kind: "rl-environment", compose_path: "compose.yaml" });
    expect((await admin.listProjects()).map((p) => p.name)).toEqual(["quickstart", "routes"]);
    expect((await admin.getProject("routes")).name).toBe("routes");
    await admin.deleteProject("routes");
    expect((await admin.listProjects()).map((p) => p.name)).toEqual(["quickstart"]);
  });

  it("throws DenvApiError with the status, code and message of the error body", async () => {
    const err = await admin.createProject({ name: "quickstart" }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(DenvApiError);
    expect(err).toMatchObject({ status: 409, code: "conflict", message: "project 'quickstart' exists" });

    const nobody = new DenvClient({ url: fake.url });
    await expect(nobody.listProjects()).rejects.toMatchObject({ status: 401, code: "unauthorized" });
    const member = new DenvClient({ url: fake.url, token: fake.memberToken });
    await expect(member.createProject({ name: "x" })).rejects.toMatchObject({
      status: 403,
      code: "forbidden",
    });
    await expect(admin.getEnvironment("quickstart/nope")).rejects.toMatchObject({
      status: 404,
      code: "not_found",
      message: "environment 'quickstart/nope' does not exist",
    });
  });

  it("names the control plane it cannot reach", async () => {
    const url = `http://127.0.0.1:${await freePort()}`;
    const client = new DenvClient({ url, token: "t" });
    const err = await client.whoami().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(DenvUnreachableError);
    expect((err as Error).message).toMatch(`cannot reach the control plane at ${url}: `);
    expect((err as Error).message).toContain("ECONNREFUSED");
  });

  it("refuses answers that do not match the schema, and bodies that are not denv's", async () => {
    const lying = new DenvClient({
      url: "http://example.invalid",
      fetch: async () => new Response(JSON.stringify({ projects: [{ name: 1 }] })),
    });
    await expect(lying.listProjects()).rejects.toMatchObject({ code: "invalid_response" });
    const proxy = new DenvClient({
      url: "http://example.invalid",
      fetch: async () => new Response("<html>bad gateway</html>", { status: 502, statusText: "Bad Gateway" }),
    });
    await expect(proxy.whoami()).rejects.toMatchObject({
      status: 502,
      code: "http_error",
      message: "GET /v1/whoami answered 502 Bad Gateway: <html>bad gateway</html>",
    });
  });

  it("refuses malformed ids before sending anything", () => {
    expect(() => admin.getEnvironment("a/b/c")).toThrow(DenvClientError);
    expect(() => admin.getVersion("quickstart-v1")).toThrow(/expected PROJECT@vN/);
    expect(() => admin.portForward("quickstart/alpha", "db")).toThrow(/not SERVICE:PORT/);
    expect(() => admin.exec("quickstart/alpha", { cmd: ["ls"], shell: "ls" })).toThrow(
      /exactly one of 'cmd'/,
    );
  });

  it("deploys a tar stream and follows the phases until the deployment finishes", async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), "denv-sdk-deploy-"));
    made.push(dir);
    await writeFile(path.join(dir, "compose.yaml"), "services: {main: {image: alpine}}\n");
    const phases: string[] = [];
    const logs: string[] = [];
    const d = await admin.deploy(
      "quickstart",
      { tar: packTar(dir, { name: "." }) },
      {
        environment: "beta",
        wait: true,
        onPhase: (p) => phases.push(`${p.name}:${p.status}`),
        onLog: (l) => logs.push(l),
      },
    );
    expect(d).toMatchObject({ kind: "deploy", environment: "quickstart/beta", status: "succeeded" });
    expect(phases[0]).toBe("resolve source:running");
    expect(phases.at(-1)).toBe("switch:succeeded");
    expect(phases).toHaveLength(18);
    expect(logs).toContain("build: done");
    expect(fake.state.lastUpload).toEqual(["compose.yaml"]);
    expect(fake.requests).toContain("POST /v1/projects/quickstart/deploy?environment=beta");
    expect((await admin.getEnvironment("quickstart/beta")).status).toBe("running");
  });

  it("returns a started deployment at once without wait, and reports a failed one", async () => {
    const started = await admin.snapshot("quickstart/alpha");
    expect(started.status).toBe("queued");
    const done = await admin.waitForDeployment(started.id);
    expect(done.status).toBe("succeeded");
    expect(done.result).toMatchObject({ id: expect.stringMatching(/^quickstart@v\d+$/) });

    fake.state.failures.push({
      kind: "fork",
      phase: "health",
      code: "timeout",
      message: "service db is not healthy",
    });
    const failed = await admin.fork("quickstart/alpha", { name: "broken" }, { wait: true });
    expect(failed.status).toBe("failed");
    expect(failed.error).toEqual({ code: "timeout", message: "service db is not healthy" });
    expect(failed.phases.map((p) => [p.name, p.status])).toEqual([
      ["place", "succeeded"],
      ["transfer", "skipped"],
      ["restore", "succeeded"],
      ["start", "succeeded"],
      ["health", "failed"],
      ["probe", "skipped"],
    ]);
  });

  it("forks, rolls back, stops, starts, verifies and destroys", async () => {
    const fork = await admin.fork("quickstart/alpha", { name: "f1" }, { wait: true });
    expect(fork.result).toMatchObject({
      id: "quickstart/f1",
      parent_version: "quickstart@v1",
      status: "running",
    });
    expect((await admin.stop("quickstart/f1", { wait: true })).status).toBe("succeeded");
    expect((await admin.getEnvironment("quickstart/f1")).status).toBe("stopped");
    await admin.start("quickstart/f1", { wait: true });
    await admin.rollback("quickstart/f1", { version: "quickstart@v1" }, { wait: true });
    const verify = await admin.verify("quickstart/f1", { wait: true });
    expect(verify.result).toMatchObject({ status: "graded", reward: 0.75 });
    await admin.destroy("quickstart/f1", { wait: true });
    await expect(admin.getEnvironment("quickstart/f1")).rejects.toMatchObject({ status: 404 });
    expect((await admin.listDeployments("quickstart")).length).toBeGreaterThan(5);
  });

  it("lists and deletes versions, sandboxes, targets, hosts, join tokens and logs", async () => {
    expect((await admin.listVersions("quickstart"))[0]?.id).toBe("quickstart@v1");
    expect((await admin.getVersion("quickstart@v1")).number).toBe(1);
    await expect(admin.deleteVersion("quickstart@v1")).rejects.toMatchObject({ status: 409 });

    const sandbox = await admin.createSandbox({ project: "quickstart", name: "ep-1", ttl_sec: 60 });
    expect(sandbox).toMatchObject({ id: "quickstart/ep-1", sandbox: true, status: "running" });
    expect((await admin.listSandboxes()).map((s) => s.id)).toEqual(["quickstart/ep-1"]);
    await admin.deleteSandbox("quickstart/ep-1");
    expect(await admin.listSandboxes()).toEqual([]);
    const batch = await admin.createSandboxes({ project: "quickstart", name: "b", count: 2 });
    expect(batch.map((s) => [s.id, s.placement.host])).toEqual([
      ["quickstart/b-1", "host-1"],
      ["quickstart/b-2", "host-1"],
    ]);
    for (const s of batch) await admin.deleteSandbox(s.id);

    expect((await admin.listTargets()).map((t) => t.name)).toEqual(["local"]);
    await expect(admin.createTarget({ name: "cloud", kind: "aws" })).rejects.toMatchObject({
      message: "target kind aws is not available yet",
    });
    const jt = await admin.createJoinToken("local", { uses: 2 });
    expect(jt).toMatchObject({ target: "local", uses_left: 2, token: expect.stringMatching(/^join-/) });
    expect((await admin.listHosts())[0]).toMatchObject({ id: "host-1", status: "online" });
    expect((await admin.listJoinTokens("local")).map((t) => t.id)).toEqual([jt.id]);
    expect((await admin.listJoinTokens("local"))[0]?.token).toBeUndefined();
    await admin.revokeJoinToken("local", jt.id);
    expect((await admin.listJoinTokens("local"))[0]?.revoked_at).toEqual(expect.any(String));
    expect(fake.requests).toContain(`DELETE /v1/targets/local/join-tokens/${jt.id}`);
    expect(await admin.drainHost("host-1")).toMatchObject({ id: "host-1", draining: true });
    await expect(admin.removeHost("host-1")).rejects.toMatchObject({
      status: 409,
      code: "conflict",
      message: HostMessages.holdsEnvironments("host-1", 2),
    });
    expect(fake.requests).toContain("DELETE /v1/hosts/host-1");
    await expect(admin.removeHost("nope", { force: true })).rejects.toMatchObject({ status: 404 });
    expect(fake.requests).toContain("DELETE /v1/hosts/nope?force=true");
    expect(await admin.logs("quickstart/alpha", { service: "db", tail: 1 })).toEqual({
      stdout: "quickstart/alpha db line 3\n",
      stderr: "",
    });
    expect(fake.requests).toContain("GET /v1/environments/quickstart/alpha/logs?service=db&tail=1");
    const token = await admin.createToken({ name: "ci", project: "quickstart" });
    expect(token).toMatchObject({ name: "ci", role: "member", token: expect.any(String) });
    expect((await admin.listTokens()).some((t) => t.name === "ci")).toBe(true);
  });

  it("lists every host by following GET /v1/hosts page by page", async () => {
    const one = fake.state.hosts.get("host-1");
    if (!one) throw new Error("the fake has no host-1");
    const ids = Array.from(
      { length: 2 * HOSTS_PAGE.max + 1 },
      (_, i) => `pool-${String(i).padStart(4, "0")}`,
    );
    for (const id of ids) fake.state.hosts.set(id, { ...one, id });
    try {
      const seen = fake.requests.length;
      const listed = (await admin.listHosts()).map((h) => h.id);
      expect(listed).toEqual(["host-1", ...ids]);
      expect(fake.requests.slice(seen)).toEqual([
        `GET /v1/hosts?limit=${HOSTS_PAGE.max}`,
        `GET /v1/hosts?limit=${HOSTS_PAGE.max}&after=${ids[HOSTS_PAGE.max - 2]}`,
        `GET /v1/hosts?limit=${HOSTS_PAGE.max}&after=${ids[2 * HOSTS_PAGE.max - 2]}`,
      ]);
    } finally {
      for (const id of ids) fake.state.hosts.delete(id);
    }
  });
});
