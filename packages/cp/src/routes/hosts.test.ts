import { HostMessages, JoinTokenMessages } from "@denv/spec";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FakeHost } from "../testing/fake-host.js";
import { type Api, deployed, startTestCp, type TestCp, upgradeStatus } from "../testing/harness.js";

/** The operator's controls over hosts and join tokens: revoke, drain, remove, and who lists what. */

const ids = (list: Array<{ id?: string; name?: string }>) => list.map((x) => x.id ?? x.name).sort();

describe("join tokens: list and revoke", () => {
  let t: TestCp;
  beforeAll(async () => {
    t = await startTestCp();
  });
  afterAll(() => t.close());

  it("lists a target's tokens without their secrets; a revoked token joins no more hosts", async () => {
    const a = (await t.admin.post("/v1/targets/local/join-tokens", { uses: 3 })).body;
    const b = (await t.admin.post("/v1/targets/local/join-tokens", {})).body;
    const joined = await FakeHost.join(t.url, a.token, { name: "early" });

    const listed = await t.admin.get("/v1/targets/local/join-tokens");
    expect(listed.status).toBe(200);
    expect(ids(listed.body.join_tokens)).toEqual([a.id, b.id].sort());
    expect(JSON.stringify(listed.body)).not.toContain("denvj_");
    expect(listed.body.join_tokens.find((x: { id: string }) => x.id === a.id)).toMatchObject({
      uses_left: 2,
      target: "local",
    });

    expect((await t.admin.del(`/v1/targets/local/join-tokens/${a.id}`)).status).toBe(204);
    // Again: still revoked, at the first time.
    const first = (await t.admin.get("/v1/targets/local/join-tokens")).body.join_tokens.find(
      (x: { id: string }) => x.id === a.id,
    ).revoked_at;
    expect(first).toEqual(expect.any(String));
    expect((await t.admin.del(`/v1/targets/local/join-tokens/${a.id}`)).status).toBe(204);
    const again = (await t.admin.get("/v1/targets/local/join-tokens")).body.join_tokens;
    expect(again.find((x: { id: string }) => x.id === a.id).revoked_at).toBe(first);
    expect(again.find((x: { id: string }) => x.id === b.id).revoked_at).toBeUndefined();

    const refused = await t.anon.post("/v1/hosts/join", { token: a.token });
    expect([refused.status, refused.body.error]).toEqual([
      401,
      { code: "unauthorized", message: JoinTokenMessages.revoked },
    ]);
    expect(JoinTokenMessages.revoked).toBe("join token is revoked");
    // The host that joined before the revocation keeps its credential.
    await joined.connect();
    expect(joined.connected).toBe(true);
    await joined.close();
    // The other token is untouched.
    expect((await FakeHost.join(t.url, b.token)).target).toBe("local");
  });

  it("answers 404 for a token of another target, an unknown token and an unknown target", async () => {
    await t.admin.post("/v1/targets", { name: "gpu", kind: "hosts" });
    const g = (await t.admin.post("/v1/targets/gpu/join-tokens", {})).body;
    const wrong = await t.admin.del(`/v1/targets/local/join-tokens/${g.id}`);
    expect([wrong.status, wrong.body.error.message]).toEqual([404, `join token ${g.id} not found`]);
    expect((await t.admin.del("/v1/targets/local/join-tokens/jt_nope")).body.error.message).toBe(
      "join token jt_nope not found",
    );
    expect((await t.admin.get("/v1/targets/nowhere/join-tokens")).body.error).toEqual({
      code: "not_found",
      message: "target nowhere not found",
    });
    // The refused revocation left the token working.
    expect((await FakeHost.join(t.url, g.token)).target).toBe("gpu");
  });
});

describe("draining and removing hosts", () => {
  let t: TestCp;
  let h1: FakeHost;
  let h2: FakeHost;
  beforeAll(async () => {
    t = await startTestCp();
    h1 = await t.host({ name: "h1" });
    h2 = await t.host({ name: "h2" });
    await deployed(t, "shop"); // shop/alpha and shop@v1 on h1 (ties go to the first id)
  });
  afterAll(() => t.close());

  const host = async (id: string) =>
    (await t.admin.get("/v1/hosts")).body.hosts.find((h: { id: string }) => h.id === id);

  it("a drained host is never placed on again; what it runs stays and still answers", async () => {
    expect((await t.admin.get("/v1/environments/shop/alpha")).body.host_id).toBe("h1");
    const drained = await t.admin.post("/v1/hosts/h1/drain");
    expect(drained.status).toBe(200);
    expect(drained.body).toMatchObject({ id: "h1", draining: true, environments: 1, status: "online" });
    expect(await host("h2")).toMatchObject({ draining: false });

    const beta = await t.admin.upload(
      "POST",
      "/v1/projects/shop/deploy?environment=beta&wait=true",
      Buffer.from("x"),
    );
    expect(beta.body.status).toBe("succeeded");
    expect(beta.body.host_id).toBe("h2");
    const place = beta.body.phases.find((p: { name: string }) => p.name === "place");
    expect(place.evidence.candidates).toContainEqual(
      expect.objectContaining({ host: "h1", excluded: "draining" }),
    );

    // Its environment still runs and answers.
    const exec = await t.admin.post("/v1/environments/shop/alpha/exec", { cmd: ["echo", "hi"] });
    expect(exec.status).toBe(200);
    expect((await t.admin.get("/v1/environments/shop/alpha")).body.status).toBe("running");

    // (A fork of shop@v1, which h1 holds, goes elsewhere now: replicas.test.ts.)

    // Draining twice is the same drain.
    expect((await t.admin.post("/v1/hosts/h1/drain")).body.draining).toBe(true);
    expect((await t.admin.post("/v1/hosts/nope/drain")).body.error).toEqual({
      code: "not_found",
      message: "host nope not found",
    });
  });

  it("with every online host draining, a deploy fails at place naming the drain", async () => {
    await t.admin.post("/v1/hosts/h2/drain");
    const r = await t.admin.upload(
      "POST",
      "/v1/projects/shop/deploy?environment=gamma&wait=true",
      Buffer.from("x"),
    );
    expect(r.body.status).toBe("failed");
    expect(r.body.error.message).toBe(HostMessages.allDraining("local"));
    expect((await t.admin.get("/v1/environments/shop/gamma")).status).toBe(404);
  });

  it("refuses to remove a host that holds environments, in one line, and changes nothing", async () => {
    const r = await t.admin.del("/v1/hosts/h2");
    expect([r.status, r.body.error]).toEqual([
      409,
      { code: "conflict", message: HostMessages.holdsEnvironments("h2", 1) },
    ]);
    expect(r.body.error.message).not.toContain("\n");
    expect(await host("h2")).toMatchObject({ status: "online", environments: 1 });
    expect(h2.connected).toBe(true);
    expect((await t.admin.get("/v1/environments/shop/beta")).body).toMatchObject({
      status: "running",
      host_id: "h2",
    });
  });

  it("force removes it: the stream closes now, the old credential gets 401, its environments fail on no host", async () => {
    const r = await t.admin.del("/v1/hosts/h1?force=true");
    expect(r.status).toBe(200);
    expect(r.body).toEqual({
      id: "h1",
      environments: ["shop/alpha"],
      versions: ["shop@v1"],
      replicas_dropped: [],
    });
    await h1.until(() => h1.closeCode !== undefined);
    expect(await host("h1")).toBeUndefined();

    const again = await upgradeStatus(`${t.url}/v1/hosts/stream`, {
      authorization: `Bearer ${h1.credential}`,
    });
    expect(again.status).toBe(401);
    expect(JSON.parse(again.body).error).toEqual({
      code: "unauthorized",
      message: HostMessages.credentialInvalid,
    });
    await expect(h1.connect()).rejects.toThrow("HTTP 401");

    const alpha = (await t.admin.get("/v1/environments/shop/alpha")).body;
    expect(alpha).toMatchObject({
      status: "failed",
      evidence: { removed: { host: "h1", reason: "host h1 was removed" } },
    });
    expect(alpha.host_id).toBeUndefined();
    expect((await t.admin.get("/v1/versions/shop/1")).status).toBe(404);
    // Destroying it now forgets it: it ran on no host.
    const destroyed = await t.admin.del("/v1/environments/shop/alpha?wait=true");
    expect(destroyed.body.status).toBe("succeeded");
    expect((await t.admin.get("/v1/environments/shop/alpha")).status).toBe(404);

    expect((await t.admin.del("/v1/hosts/h1")).body.error).toEqual({
      code: "not_found",
      message: "host h1 not found",
    });
  });

  it("removes a host with nothing on it without force", async () => {
    const h3 = await t.host({ name: "h3" });
    const r = await t.admin.del("/v1/hosts/h3");
    expect(r.body).toEqual({ id: "h3", environments: [], versions: [], replicas_dropped: [] });
    await h3.until(() => h3.closeCode !== undefined);
  });
});

describe("who lists which hosts and targets", () => {
  let t: TestCp;
  const as = {} as Record<"scoped" | "other" | "member" | "idle", Api>;
  beforeAll(async () => {
    t = await startTestCp();
    await t.admin.post("/v1/targets", { name: "gpu", kind: "hosts" });
    await t.admin.post("/v1/targets", { name: "spare", kind: "hosts" });
    await t.host({ name: "l1" });
    await t.host({ name: "g1", target: "gpu" });
    await t.host({ name: "s1", target: "spare" });
    await deployed(t, "shop");
    await t.admin.post("/v1/projects", { name: "ml" });
    const r = await t.admin.upload(
      "POST",
      "/v1/projects/ml/deploy?environment=alpha&target=gpu&wait=true",
      Buffer.from("x"),
    );
    expect(r.body.host_id).toBe("g1");
    await t.admin.post("/v1/projects", { name: "empty" });
    const token = async (body: Record<string, unknown>) =>
      t.admin.as((await t.admin.post("/v1/tokens", body)).body.token);
    as.scoped = await token({ name: "shop-ci", project: "shop" });
    as.other = await token({ name: "ml-ci", project: "ml" });
    as.idle = await token({ name: "empty-ci", project: "empty" });
    as.member = await token({ name: "member" });
  });
  afterAll(() => t.close());

  it("an admin lists every host and target; other tokens the ones their projects' environments use", async () => {
    const hosts = async (a: Api) => ids((await a.get("/v1/hosts")).body.hosts);
    const targets = async (a: Api) => ids((await a.get("/v1/targets")).body.targets);
    expect(await hosts(t.admin)).toEqual(["g1", "l1", "s1"]);
    expect(await targets(t.admin)).toEqual(["gpu", "local", "spare"]);
    expect(await hosts(as.scoped)).toEqual(["l1"]);
    expect(await targets(as.scoped)).toEqual(["local"]);
    expect(await hosts(as.other)).toEqual(["g1"]);
    expect(await targets(as.other)).toEqual(["gpu"]);
    expect(await hosts(as.idle)).toEqual([]);
    expect(await targets(as.idle)).toEqual([]);
    // An unscoped member sees every project, so the hosts of every environment (not idle ones).
    expect(await hosts(as.member)).toEqual(["g1", "l1"]);
    expect(await targets(as.member)).toEqual(["gpu", "local"]);
  });

  it("a host credential is not an API token", async () => {
    const jt = (await t.admin.post("/v1/targets/local/join-tokens", {})).body.token;
    const joined = await FakeHost.join(t.url, jt);
    const r = await t.admin.as(joined.credential).get("/v1/hosts");
    expect([r.status, r.body.error]).toEqual([
      401,
      { code: "unauthorized", message: HostMessages.credentialNotApiToken },
    ]);
  });
});
