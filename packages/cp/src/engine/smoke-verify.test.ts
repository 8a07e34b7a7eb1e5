import { ControlPlaneMessages } from "@denv/spec";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FakeHost } from "../testing/fake-host.js";
import { startTestCp, type TestCp } from "../testing/harness.js";

type Phase = { name: string; status: string; evidence?: Record<string, unknown> };
const phase = (d: { phases: Phase[] }, name: string) => d.phases.find((p) => p.name === name) as Phase;

/**
 * x-denv.verifier.smoke against a fake host: the deploy's `smoke verify` phase asks the host to
 * grade the new version (env.verify with `version`: no agent stopped, nothing snapshotted)
 * before the switch; its reward is the phase's evidence. With `expect`, another reward fails
 * the deploy in that phase with the spec's line, and the environment keeps its version.
 */
describe("smoke verify on deploy", () => {
  let t: TestCp;
  let h: FakeHost;
  const deploy = () => t.admin.upload("POST", "/v1/projects/shop/deploy?wait=true", Buffer.from("a tar"));

  beforeAll(async () => {
    t = await startTestCp();
    h = await t.host({ name: "h1", validateSmoke: {}, smokeReward: 0 });
    await t.admin.post("/v1/projects", { name: "shop" });
  });
  afterAll(() => t.close());

  it("grades the new version untouched before the switch, and records the reward", async () => {
    const r = await deploy();
    expect(r.body.status).toBe("succeeded");
    const names = r.body.phases.map((p: Phase) => p.name);
    expect(names.indexOf("smoke verify")).toBe(names.indexOf("snapshot") + 1);
    expect(names.indexOf("switch")).toBe(names.indexOf("smoke verify") + 1);
    expect(phase(r.body, "smoke verify")).toMatchObject({
      status: "succeeded",
      evidence: { status: "graded", reward: 0, rewards: { tests: 0 }, verifier: { user: "1001" } },
    });
    const deployCmd = await h.command("env.deploy");
    const smoke = await h.command("env.verify");
    expect(smoke.id).toBe(`${r.body.id}.smoke`);
    expect(smoke.payload).toEqual({
      environment: `shop/${deployCmd.payload.environment}`,
      version: "shop@v1",
    });
    // Nothing was snapshotted for it: v1 is the project's only version, and alpha runs it.
    const versions = (await t.admin.get("/v1/projects/shop/versions")).body.versions;
    expect(versions.map((v: { id: string }) => v.id)).toEqual(["shop@v1"]);
    expect((await t.admin.get("/v1/environments/shop/alpha")).body.version).toBe("shop@v1");
  });

  it("a host that answers for another version than the one asked about is refused, and nothing switches", async () => {
    h.rogue.set("env.verify", (r) => {
      const graded = r as { snapshot: Record<string, unknown> };
      return { ...graded, version: "shop@v9", snapshot: { ...graded.snapshot, id: "shop@v9", number: 9 } };
    });
    try {
      const r = await deploy();
      expect(r.body.status).toBe("failed");
      expect(r.body.error.message).toContain(
        `host ${h.id} answered env.verify for something it was not asked about`,
      );
      expect(phase(r.body, "smoke verify").status).toBe("failed");
      expect(phase(r.body, "switch").status).toBe("skipped");
    } finally {
      h.rogue.delete("env.verify");
    }
    expect((await t.admin.get("/v1/environments/shop/alpha")).body.version).toBe("shop@v1");
  });

  it("with expect, another reward fails the deploy in that phase and nothing switches", async () => {
    await t.close();
    t = await startTestCp();
    h = await t.host({ name: "h1", validateSmoke: { expect: 1 }, smokeReward: 1 });
    await t.admin.post("/v1/projects", { name: "shop" });
    const first = await deploy();
    expect(first.body.status).toBe("succeeded");
    expect(phase(first.body, "smoke verify").evidence).toMatchObject({ reward: 1, expect: 1 });

    h.smokeReward = 0;
    const r = await deploy();
    const message = ControlPlaneMessages.smokeMismatch("shop@v2", "reward 0", 1);
    expect(r.body.status).toBe("failed");
    expect(r.body.error).toEqual({ code: "verifier_failed", message });
    expect(phase(r.body, "smoke verify")).toMatchObject({ status: "failed", evidence: { error: message } });
    expect(phase(r.body, "switch").status).toBe("skipped");
    // alpha still runs v1; v2 is kept, to fork and see why; the new host environment is gone.
    expect((await t.admin.get("/v1/environments/shop/alpha")).body.version).toBe("shop@v1");
    const versions = (await t.admin.get("/v1/projects/shop/versions")).body.versions;
    expect(versions.map((v: { id: string }) => v.id).sort()).toEqual(["shop@v1", "shop@v2"]);
    const attempt = h.commands.filter((c) => c.kind === "env.deploy").at(-1)?.payload.environment as string;
    expect(h.environments.has(`shop/${attempt}`)).toBe(false);
  });
});
