import { JoinTokenMessages, TargetMessages } from "@denv/spec";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FakeHost } from "../testing/fake-host.js";
import { startTestCp, type TestCp, upgradeStatus, waitFor } from "../testing/harness.js";

describe("joining hosts", () => {
  let t: TestCp;
  beforeAll(async () => {
    t = await startTestCp();
    await t.admin.post("/v1/targets", { name: "gpu", kind: "hosts" });
  });
  afterAll(() => t.close());

  const joinToken = async (target: string, body: Record<string, unknown> = {}) =>
    (await t.admin.post(`/v1/targets/${target}/join-tokens`, body)).body as {
      token: string;
      id: string;
      uses_left: number;
    };

  const refusal = async (token: string, extra: Record<string, unknown> = {}) => {
    const r = await t.anon.post("/v1/hosts/join", { token, ...extra });
    return [r.status, r.body.error?.code, r.body.error?.message];
  };

  it("a join token joins a host to its target; the credential opens the stream and the host goes online", async () => {
    const jt = await joinToken("gpu", { uses: 1, ttl_sec: 60 });
    expect(jt.token).toMatch(/^denvj_/);
    expect(jt.uses_left).toBe(1);
    const h = await FakeHost.join(t.url, jt.token, { name: "box-1", labels: { gpu: "a100" } });
    expect(h.id).toBe("box-1");
    expect(h.target).toBe("gpu");
    expect(h.credential).toMatch(/^denvh_/);
    await h.connect();
    const host = await waitFor(async () =>
      (await t.admin.get("/v1/hosts")).body.hosts.find(
        (x: { id: string; status: string }) => x.id === "box-1" && x.status === "online",
      ),
    );
    expect(host).toMatchObject({
      target: "gpu",
      labels: { gpu: "a100" },
      version: "0.1.0-fake",
      capacity: { cpus: 8 },
    });
    await h.close();
    await waitFor(async () =>
      (await t.admin.get("/v1/hosts")).body.hosts.find(
        (x: { id: string; status: string }) => x.id === "box-1" && x.status === "offline",
      ),
    );
  });

  it("a second host asking for a taken name gets a name of its own", async () => {
    const h = await FakeHost.join(t.url, (await joinToken("gpu")).token, { name: "box-1" });
    expect(h.id).toMatch(/^box-1-[a-z0-9]{6}$/);
  });

  it("a used single-use token is refused: 'join token is used up'", async () => {
    const jt = await joinToken("gpu");
    await FakeHost.join(t.url, jt.token);
    expect(await refusal(jt.token)).toEqual([401, "unauthorized", JoinTokenMessages.usedUp]);
    expect(JoinTokenMessages.usedUp).toBe("join token is used up");
  });

  it("a multi-use token joins as many hosts as it has uses", async () => {
    const jt = await joinToken("gpu", { uses: 2 });
    await FakeHost.join(t.url, jt.token);
    await FakeHost.join(t.url, jt.token);
    expect(await refusal(jt.token)).toEqual([401, "unauthorized", "join token is used up"]);
  });

  it("an expired token is refused: 'join token is expired'", async () => {
    const jt = await joinToken("gpu", { ttl_sec: 1 });
    await new Promise((r) => setTimeout(r, 1100));
    expect(await refusal(jt.token)).toEqual([401, "unauthorized", "join token is expired"]);
    expect(JoinTokenMessages.expired).toBe("join token is expired");
  });

  it("garbage, another target's token, and a host credential are 'join token is not valid'", async () => {
    expect(await refusal("garbage")).toEqual([401, "unauthorized", "join token is not valid"]);
    expect(await refusal("denvj_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA")).toEqual([
      401,
      "unauthorized",
      JoinTokenMessages.invalid,
    ]);
    const local = await joinToken("local");
    expect(await refusal(local.token, { target: "gpu" })).toEqual([
      401,
      "unauthorized",
      "join token is not valid",
    ]);
    // The refusal took no use: the token still joins its own target.
    const h = await FakeHost.join(t.url, local.token, { target: "local" });
    expect(h.target).toBe("local");
    expect(await refusal(h.credential)).toEqual([401, "unauthorized", "join token is not valid"]);
  });

  it("the stream refuses a missing or wrong credential before the upgrade, and a hello of another host", async () => {
    for (const auth of [undefined, "Bearer denvh_nope", `Bearer ${t.cp.adminToken}`]) {
      const r = await upgradeStatus(`${t.url}/v1/hosts/stream`, auth ? { authorization: auth } : {});
      expect(r.status).toBe(401);
      expect(JSON.parse(r.body).error.code).toBe("unauthorized");
    }
    const a = await FakeHost.join(t.url, (await joinToken("gpu")).token);
    const b = await FakeHost.join(t.url, (await joinToken("gpu")).token);
    // b's credential with a's id in the hello: closed as a protocol violation.
    Object.defineProperty(b, "id", { value: a.id });
    await b.connect();
    await b.until(() => b.closeCode !== undefined);
    expect(b.closeCode).toBe(1008);
  });

  it("join tokens are admin-only and their target must exist", async () => {
    const member = (await t.admin.post("/v1/tokens", { name: "m", role: "member" })).body.token as string;
    expect((await t.admin.as(member).post("/v1/targets/gpu/join-tokens", {})).status).toBe(403);
    expect((await t.admin.post("/v1/targets/nowhere/join-tokens", {})).status).toBe(404);
    // A target refused at creation (modal without its token) takes no join tokens: it does not exist.
    const refused = await t.admin.post("/v1/targets", { name: "cloud", kind: "modal" });
    expect(refused.status).toBe(400);
    expect(refused.body.error.message).toBe(
      TargetMessages.missingCredential("modal", "token_id", "MODAL_TOKEN_ID"),
    );
    expect((await t.admin.post("/v1/targets/cloud/join-tokens", {})).status).toBe(404);
  });
});
