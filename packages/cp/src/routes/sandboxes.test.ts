import { HostMessages, PlacementMessages, SandboxMessages } from "@denv/spec";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FakeHost } from "../testing/fake-host.js";
import { deployed, startTestCp, type TestCp } from "../testing/harness.js";

/** Placement through the API with several fake hosts: sandboxes by the count, deploy labels, room. */

const GiB = 1024 ** 3;
const place = (d: { phases: Array<{ name: string; evidence?: unknown }> }) =>
  // biome-ignore lint/suspicious/noExplicitAny: tests read loosely typed JSON bodies
  d.phases.find((p) => p.name === "place")?.evidence as any;

describe("POST /v1/sandboxes with count", () => {
  let t: TestCp;
  let h1: FakeHost;
  let h2: FakeHost;
  beforeAll(async () => {
    // Caps committed exactly (ratio 1): these rows count room to the byte and the cpu.
    t = await startTestCp({ placementOvercommitMemory: 1, placementOvercommitCpus: 1 });
    // Room for alpha and three 1 GiB forks on h1 (4 GiB of memory, each environment reports 1 GiB).
    h1 = await t.host({ name: "h1", capacity: { cpus: 8, memory_bytes: 4 * GiB, disk_free_bytes: GiB } });
    h2 = await t.host({ name: "h2", capacity: { cpus: 8, memory_bytes: 64 * GiB, disk_free_bytes: GiB } });
    // The first deploy lands on h2 (most room); move the project's version to h1 by draining h2.
    await t.admin.post("/v1/projects", { name: "shop" });
    await t.admin.post("/v1/hosts/h2/drain");
    await deployed(t, "shop");
  });
  afterAll(() => t.close());

  const hostEnvs = (h: FakeHost) => [...h.environments.keys()].sort();

  it("creates N forks in one call, each with its placement; where the version is, and nowhere else", async () => {
    const r = await t.admin.post("/v1/sandboxes", { project: "shop", count: 2, name: "ep" });
    expect(r.status, JSON.stringify(r.body)).toBe(201);
    expect(r.body.sandboxes.map((s: { id: string }) => s.id)).toEqual(["shop/ep-1", "shop/ep-2"]);
    for (const s of r.body.sandboxes) {
      expect(s).toMatchObject({ sandbox: true, status: "running", version: "shop@v1", host_id: "h1" });
      expect(s.placement).toMatchObject({
        host: "h1",
        reason: "holds shop@v1 (snapshot locality)",
        need: { memory_bytes: GiB, cpus: 1, pids: 512 },
      });
      expect(s.placement.candidates).toContainEqual(
        expect.objectContaining({ host: "h2", excluded: "draining" }),
      );
    }
    // alpha (1 GiB) then ep-1 (1 GiB) were on h1 when ep-2 was placed: 2 GiB free of 4.
    const free = r.body.sandboxes.map(
      (s: { placement: { candidates: Array<{ host: string; free?: { memory_bytes: number } }> } }) =>
        s.placement.candidates.find((c) => c.host === "h1")?.free?.memory_bytes,
    );
    expect(free.sort()).toEqual([2 * GiB, 3 * GiB]);
    for (const s of r.body.sandboxes)
      expect((await t.admin.del(`/v1/sandboxes/${s.id}?wait=true`)).status).toBe(200);
  });

  it("without count the answer is the sandbox itself, as before", async () => {
    const r = await t.admin.post("/v1/sandboxes", { project: "shop", name: "one" });
    expect(r.status).toBe(201);
    expect(r.body).toMatchObject({ id: "shop/one", sandbox: true, host_id: "h1" });
    expect(r.body.sandboxes).toBeUndefined();
    expect(r.body.placement).toBeUndefined();
    expect((await t.admin.del("/v1/sandboxes/shop/one?wait=true")).status).toBe(200);
  });

  it("count is 1 to 256", async () => {
    for (const count of [0, 257, 1.5]) {
      const r = await t.admin.post("/v1/sandboxes", { project: "shop", count });
      expect(r.status, String(count)).toBe(400);
      expect(r.body.error.code).toBe("invalid_request");
    }
  });

  it("when one cannot be placed, those created are destroyed and the error names the one that failed", async () => {
    const before = hostEnvs(h1);
    const r = await t.admin.post("/v1/sandboxes", { project: "shop", count: 5, name: "batch" });
    expect(r.status).toBe(409);
    // Room for three: forks place one at a time, so the fourth and fifth find none.
    const m = /^sandbox (\d) of 5 \((shop\/batch-\d)\) failed: /.exec(r.body.error.message);
    expect(m, r.body.error.message).not.toBeNull();
    const [, index, id] = m as unknown as [string, string, string];
    expect(["1", "2", "3", "4", "5"]).toContain(index);
    // h1 holds the version and is full; h2, which it could be sent to, is draining.
    const why = PlacementMessages.noHostWithRoom(
      "local",
      "1 GiB memory, 1 cpus, 512 pids",
      `h1: ${PlacementMessages.notEnough("memory", "1 GiB", "0 B", "4 GiB")}`,
      "--placement-overcommit-memory",
    );
    expect(r.body.error).toEqual({
      code: "conflict",
      message: SandboxMessages.batchFailed(Number(index), 5, id, why, 3),
    });
    expect(r.body.error.message).toContain("(h1: not enough memory: needs 1 GiB, 0 B free of 4 GiB)");
    expect((await t.admin.get("/v1/sandboxes")).body.sandboxes).toEqual([]);
    for (let i = 1; i <= 5; i++)
      expect((await t.admin.get(`/v1/environments/shop/batch-${i}`)).status).toBe(404);
    expect(hostEnvs(h1)).toEqual(before);
    // The room is back: the same three fit now.
    const again = await t.admin.post("/v1/sandboxes", { project: "shop", count: 3 });
    expect(again.status, JSON.stringify(again.body)).toBe(201);
    for (const s of again.body.sandboxes) await t.admin.del(`/v1/sandboxes/${s.id}?wait=true`);
  });

  it("a fork that fails on its host mid-batch: the others are destroyed too", async () => {
    const before = hostEnvs(h1);
    h1.failures.set("env.fork", {
      code: "egress_leak",
      message: "refused: the egress probe found a way out",
    });
    const r = await t.admin.post("/v1/sandboxes", { project: "shop", count: 3, name: "leak" });
    expect(r.status).toBe(412);
    const m = /^sandbox (\d) of 3 \((shop\/leak-\d)\) failed: /.exec(r.body.error.message);
    const [, index, id] = m as unknown as [string, string, string];
    expect(r.body.error).toEqual({
      code: "egress_leak",
      message: SandboxMessages.batchFailed(
        Number(index),
        3,
        id,
        "refused: the egress probe found a way out",
        2,
      ),
    });
    expect((await t.admin.get("/v1/sandboxes")).body.sandboxes).toEqual([]);
    expect(hostEnvs(h1)).toEqual(before);
  });

  it("with the version's host draining too, the batch fails at once naming the drain", async () => {
    await t.admin.post("/v1/hosts/h1/drain");
    const r = await t.admin.post("/v1/sandboxes", { project: "shop", count: 2, name: "late" });
    expect(r.status).toBe(409);
    expect(r.body.error.message).toBe(
      SandboxMessages.batchFailed(1, 2, "shop/late-1", HostMessages.allDraining("local"), 0),
    );
    expect(h2.environments.size).toBe(0);
  });
});

describe("deploy placement labels and room", () => {
  let t: TestCp;
  beforeAll(async () => {
    // Caps committed exactly (ratio 1): these rows count room to the byte and the cpu.
    t = await startTestCp({ placementOvercommitMemory: 1, placementOvercommitCpus: 1 });
    await t.host({ name: "big", capacity: { cpus: 8, memory_bytes: 64 * GiB, disk_free_bytes: GiB } });
    await t.host({
      name: "gpu",
      labels: { gpu: "a100" },
      capacity: { cpus: 8, memory_bytes: 8 * GiB, disk_free_bytes: GiB },
    });
    await t.admin.post("/v1/projects", { name: "shop" });
  });
  afterAll(() => t.close());

  const deploy = (env: string, query = "") =>
    t.admin.upload("POST", `/v1/projects/shop/deploy?environment=${env}&wait=true${query}`, Buffer.from("x"));

  it("?placement=k=v goes to a host carrying the labels; the others are excluded as missing them", async () => {
    const plain = await deploy("alpha");
    expect(plain.body.host_id).toBe("big");
    const r = await deploy("train", "&placement=gpu=a100");
    expect(r.body.status, JSON.stringify(r.body)).toBe("succeeded");
    expect(r.body.host_id).toBe("gpu");
    expect(place(r.body)).toMatchObject({ host: "gpu", labels: { gpu: "a100" } });
    expect(place(r.body).candidates).toContainEqual(
      expect.objectContaining({ host: "big", excluded: "missing label gpu=a100" }),
    );
  });

  it("no host with the labels, and a malformed ?placement, are refused in one line", async () => {
    const r = await deploy("nowhere", "&placement=gpu=h100,zone=eu");
    expect(r.body.status).toBe("failed");
    expect(r.body.error.message).toBe(PlacementMessages.noHostWithLabels("local", "gpu=h100, zone=eu"));
    expect((await t.admin.get("/v1/environments/shop/nowhere")).status).toBe(404);
    const bad = await deploy("bad", "&placement=gpu");
    expect(bad.status).toBe(400);
  });

  it("no host with room: the deploy fails at place naming the closest miss", async () => {
    // gpu has 8 GiB and holds train; every environment of the project reports 1 GiB: seven more fit.
    for (const env of ["g1", "g2", "g3", "g4", "g5", "g6", "g7"]) {
      const r = await deploy(env, "&placement=gpu=a100");
      expect(r.body.status, env).toBe("succeeded");
    }
    const r = await deploy("g8", "&placement=gpu=a100");
    expect(r.body.status).toBe("failed");
    expect(r.body.error.message).toBe(
      PlacementMessages.noHostWithRoom(
        "local",
        "1 GiB memory, 1 cpus, 512 pids",
        "gpu: not enough memory: needs 1 GiB, 0 B free of 8 GiB",
        "--placement-overcommit-memory",
      ),
    );
  });
});
