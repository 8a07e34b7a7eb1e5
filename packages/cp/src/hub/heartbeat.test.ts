import { ControlPlaneMessages } from "@denv/spec";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { deployed, startTestCp, type TestCp, waitFor } from "../testing/harness.js";
import { beatSlice } from "./hub.js";

describe("host sessions: heartbeats, offline, reconciliation", () => {
  let t: TestCp;
  beforeAll(async () => {
    t = await startTestCp({ heartbeatMs: 100 });
  });
  afterAll(() => t.close());

  const hostStatus = async (id: string) =>
    (await t.admin.get("/v1/hosts")).body.hosts.find((h: { id: string }) => h.id === id)?.status;

  it("a host that misses heartbeats is marked offline and its socket closed; one that beats stays online", async () => {
    const quiet = await t.host({ name: "quiet", heartbeatMs: 100 });
    const alive = await t.host({ name: "alive", heartbeatMs: 100 });
    quiet.heartbeats = false;
    const started = Date.now();
    await quiet.until(() => quiet.closeCode !== undefined, 5_000);
    // 3 missed beats of 100 ms, checked every 100 ms.
    expect(Date.now() - started).toBeGreaterThanOrEqual(250);
    expect(await waitFor(async () => (await hostStatus("quiet")) === "offline")).toBe(true);
    expect(await hostStatus("alive")).toBe("online");
    expect(alive.connected).toBe(true);
    const metrics = (await t.anon.get("/metrics")).body as string;
    expect(metrics).toMatch(/^denv_hosts_online 1$/m);
    await alive.close();
  });

  it("sends every host a heartbeat each period, in slices of the period", async () => {
    const hosts = await Promise.all(["b1", "b2", "b3"].map((name) => t.host({ name, heartbeatMs: 100 })));
    await new Promise((r) => setTimeout(r, 650));
    for (const h of hosts) {
      const got = h.heartbeatsReceived;
      expect(got.length).toBeGreaterThanOrEqual(4);
      const gaps = got.slice(1).map((at, i) => at - (got[i] as number));
      expect(Math.max(...gaps)).toBeLessThan(200);
    }
    await Promise.all(hosts.map((h) => h.close()));
  });

  it("spreads hosts over the slices by a stable hash of their id", () => {
    const counts = new Array(20).fill(0);
    for (let i = 0; i < 1000; i++) counts[beatSlice(`host-${i.toString(36)}x`, 20)]++;
    expect(Math.min(...counts)).toBeGreaterThan(25);
    expect(Math.max(...counts)).toBeLessThan(80);
    expect(beatSlice("host-abc", 20)).toBe(beatSlice("host-abc", 20));
  });

  it("environments the host no longer holds are marked failed when it says hello again", async () => {
    const h = await t.host({ name: "keeper", heartbeatMs: 100 });
    await deployed(t, "shop");
    const env = (await t.admin.get("/v1/environments/shop/alpha")).body;
    expect(env.status).toBe("running");
    h.disconnect();
    await waitFor(async () => (await hostStatus("keeper")) === "offline");
    const offline = await t.admin.post("/v1/environments/shop/alpha/exec", { cmd: ["true"] });
    expect(offline.status).toBe(409);
    expect(offline.body.error.message).toBe(ControlPlaneMessages.hostOffline("keeper"));
    h.environments.clear();
    await h.connect();
    const failed = await waitFor(async () => {
      const e = (await t.admin.get("/v1/environments/shop/alpha")).body;
      return e.status === "failed" && e;
    });
    expect(failed.evidence.reconcile.reason).toBe("host keeper no longer holds it");
    await h.close();
  });
});
