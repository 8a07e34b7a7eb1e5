import { MAX_POOL_SIZE, PoolMessages } from "@denv/spec";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FakeHost } from "../testing/fake-host.js";
import { deployed, startTestCp, type TestCp, waitFor } from "../testing/harness.js";

/**
 * Warm fork pools through the API, with fake hosts: a claim takes a ready fork (re-probed), a
 * refill keeps the size, a new version retires the old forks, the pool survives a restart, its
 * forks count against their host's room, and a fork whose probe fails at claim time is
 * destroyed, never handed out.
 */

const GiB = 1024 ** 3;

describe("warm fork pools", () => {
  let t: TestCp;
  let h: FakeHost;

  beforeAll(async () => {
    t = await startTestCp({ poolIntervalMs: 50, placementOvercommitMemory: 1 });
    // Room for alpha and four 1 GiB forks (each environment of the fake reports 1 GiB).
    h = await t.host({ name: "h1", capacity: { cpus: 16, memory_bytes: 5 * GiB, disk_free_bytes: GiB } });
    await deployed(t, "shop");
  });
  afterAll(() => t.close());

  const pool = async (project = "shop") => (await t.admin.get(`/v1/projects/${project}/pool`)).body;
  const members = () => [...h.environments.keys()].filter((k) => k.startsWith("shop/pool-"));
  const ready = (n: number) =>
    waitFor(async () => (await pool()).ready === n && (await pool()).filling === 0);

  it("is off until its file or an admin gives it a size; a bad size is refused in one line", async () => {
    expect(await pool()).toEqual({
      project: "shop",
      version: "shop@v1",
      size: 0,
      source: "off",
      ready: 0,
      filling: 0,
    });
    const bad = await t.admin.put("/v1/projects/shop/pool", { size: MAX_POOL_SIZE + 1 });
    expect(bad.status).toBe(400);
    const worse = await t.admin.put("/v1/projects/shop/pool", { size: -1 });
    expect(worse.status).toBe(400);
    expect(members()).toEqual([]);
  });

  it("fills to its size with forks that are no environments of the project", async () => {
    const r = await t.admin.put("/v1/projects/shop/pool", { size: 2 });
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ size: 2, source: "set" });
    await ready(2);
    expect(members()).toHaveLength(2);
    const envs = (await t.admin.get("/v1/projects/shop/environments")).body.environments;
    expect(envs.map((e: { id: string }) => e.id)).toEqual(["shop/alpha"]);
    const listed = (await t.admin.get("/v1/pools")).body.pools;
    expect(listed).toEqual([
      { project: "shop", version: "shop@v1", size: 2, source: "set", ready: 2, filling: 0 },
    ]);
  });

  it("a sandbox claims a ready fork (pool: hit, the probe re-taken) and the pool refills", async () => {
    const before = members();
    const probes = h.commands.filter((c) => c.kind === "env.probe_egress").length;
    const r = await t.admin.post("/v1/sandboxes", { project: "shop", name: "ep1" });
    expect(r.status, JSON.stringify(r.body)).toBe(201);
    expect(r.body).toMatchObject({
      id: "shop/ep1",
      sandbox: true,
      status: "running",
      pool: "hit",
      version: "shop@v1",
    });
    // The host environment of a pool member is named after it.
    expect(before.some((m) => m.startsWith(`${r.body.evidence.pool.member}-`))).toBe(true);
    expect(r.body.evidence.pool.probe.ok).toBe(true);
    expect(h.commands.filter((c) => c.kind === "env.probe_egress").length).toBe(probes + 1);
    // The claimed fork is the sandbox now; the pool makes another.
    await ready(2);
    expect(members()).toHaveLength(3);
    const del = await t.admin.del("/v1/sandboxes/shop/ep1?wait=true");
    expect(del.status).toBe(200);
  });

  it("its forks count against the host's room: the pool never grows past it, and a deploy finds none", async () => {
    // alpha + 4 forks of 1 GiB fill the host's 5 GiB; the fifth fork has no room.
    await t.admin.put("/v1/projects/shop/pool", { size: 5 });
    await waitFor(async () => {
      const d = (await t.admin.get("/v1/projects/shop/deployments")).body.deployments ?? [];
      return d.some(
        (x: { kind: string; status: string; error?: { message: string } }) =>
          x.kind === "fork" && x.status === "failed" && /has room/.test(x.error?.message ?? ""),
      );
    });
    expect((await pool()).ready).toBe(4);
    const beta = await t.admin.upload(
      "POST",
      "/v1/projects/shop/deploy?environment=beta&wait=true",
      Buffer.from("a tar"),
    );
    expect(beta.body.status).toBe("failed");
    expect(beta.body.error.message).toMatch(/h1: not enough memory: needs 1 GiB, 0 B free of 5 GiB/);
    await t.admin.put("/v1/projects/shop/pool", { size: 2 });
    await waitFor(() => members().length === 2);
    await ready(2);
  });

  it("a fork whose probe fails at claim time is destroyed, never handed out", async () => {
    const before = members();
    h.rogue.set("env.probe_egress", (r) => ({
      ...(r as object),
      ok: false,
      findings: ["the reject rule is gone"],
    }));
    let r: Awaited<ReturnType<typeof t.admin.post>>;
    try {
      r = await t.admin.post("/v1/sandboxes", { project: "shop", name: "ep6" });
    } finally {
      h.rogue.delete("env.probe_egress");
    }
    // Both pool forks failed the probe: the sandbox is a cold fork.
    expect(r.status, JSON.stringify(r.body)).toBe(201);
    expect(r.body.pool).toBe("miss");
    await waitFor(() => before.every((m) => !h.environments.has(m)));
    expect(PoolMessages.discarded("shop/pool-x", "why")).toContain("was destroyed, not handed out");
    expect((await t.admin.del("/v1/sandboxes/shop/ep6?wait=true")).status).toBe(200);
    await ready(2);
  });

  it("a claim whose members all fail their probe gets the room before the pool refills", async () => {
    await ready(2);
    // The members a failed probe discards keep their room while their destroy waits (held here),
    // and the second member's probe waits too: long enough for several refill passes.
    h.rogue.set("env.probe_egress", (r) => ({
      ...(r as object),
      ok: false,
      findings: ["the reject rule is gone"],
    }));
    const probes = new Set<string>();
    h.hold = (c) => {
      if (c.kind === "env.probe_egress") probes.add(c.id);
      return c.kind === "env.destroy" || (c.kind === "env.probe_egress" && [...probes].indexOf(c.id) > 0);
    };
    const probesBefore = h.commands.filter((c) => c.kind === "env.probe_egress").length;
    let r: Awaited<ReturnType<typeof t.admin.post>>;
    try {
      const posted = t.admin.post("/v1/sandboxes", { project: "shop", name: "ep8" });
      const second = await h.command("env.probe_egress", probesBefore + 1);
      await new Promise((done) => setTimeout(done, 400));
      h.release(second.id);
      r = await posted;
    } finally {
      h.rogue.delete("env.probe_egress");
      h.hold = () => false;
      for (const c of h.commands.filter((x) => x.kind === "env.destroy" || x.kind === "env.probe_egress")) {
        try {
          h.release(c.id);
        } catch {
          // answered already
        }
      }
    }
    // Without the wait the refill took the room the cold fork needed: 409, no host has room.
    expect(r.status, JSON.stringify(r.body)).toBe(201);
    expect(r.body.pool).toBe("miss");
    expect((await t.admin.del("/v1/sandboxes/shop/ep8?wait=true")).status).toBe(200);
    await ready(2);
  });

  it("survives a restart of the control plane: the same forks, still claimable", async () => {
    const before = members().sort();
    await t.restart({ poolIntervalMs: 50, placementOvercommitMemory: 1 });
    await h.until(() => !h.connected);
    await h.connect(t.url);
    await waitFor(async () => (await t.admin.get("/v1/hosts")).body.hosts[0]?.status === "online");
    await ready(2);
    expect(members().sort()).toEqual(before);
    const r = await t.admin.post("/v1/sandboxes", { project: "shop", name: "ep7" });
    expect(r.body.pool).toBe("hit");
    expect((await t.admin.del("/v1/sandboxes/shop/ep7?wait=true")).status).toBe(200);
    await ready(2);
  });

  it("a new version retires the old forks; size 0 empties the pool", async () => {
    const old = members();
    await deployed(t, "shop");
    await waitFor(async () => (await pool()).version === "shop@v2" && (await pool()).ready === 2);
    await waitFor(() => old.every((m) => !h.environments.has(m)));
    const r = await t.admin.post("/v1/sandboxes", { project: "shop", name: "ep8" });
    expect(r.body).toMatchObject({ pool: "hit", version: "shop@v2" });
    expect((await t.admin.del("/v1/sandboxes/shop/ep8?wait=true")).status).toBe(200);
    await t.admin.put("/v1/projects/shop/pool", { size: 0 });
    await waitFor(() => members().length === 0);
  });

  it("takes its size from the file's x-denv.pool unless an admin set one", async () => {
    const f = await t.host({
      name: "h2",
      validatePool: 1,
      capacity: { cpus: 16, memory_bytes: 8 * GiB, disk_free_bytes: GiB },
    });
    await t.admin.post("/v1/hosts/h1/drain");
    await deployed(t, "lab");
    await waitFor(async () => (await pool("lab")).ready === 1);
    expect(await pool("lab")).toMatchObject({ size: 1, source: "file" });
    await t.admin.put("/v1/projects/lab/pool", { size: null });
    expect(await pool("lab")).toMatchObject({ size: 1, source: "file" });
    await t.admin.put("/v1/projects/lab/pool", { size: 0 });
    await waitFor(() => ![...f.environments.keys()].some((k) => k.startsWith("lab/pool-")));
  });
});

describe("50 episodes in flight against a pool", () => {
  let t: TestCp;
  let h: FakeHost;
  beforeAll(async () => {
    t = await startTestCp({ poolIntervalMs: 50 });
    h = await t.host({ name: "big", capacity: { cpus: 256, memory_bytes: 256 * GiB, disk_free_bytes: GiB } });
    await deployed(t, "shop");
  });
  afterAll(() => t.close());

  it("every claim takes a different fork, every episode ends, and nothing is left afterwards", async () => {
    const pool = async () => (await t.admin.get("/v1/projects/shop/pool")).body;
    await t.admin.put("/v1/projects/shop/pool", { size: 4 });
    await waitFor(async () => (await pool()).ready === 4);
    const episodes = await Promise.all(
      Array.from({ length: 50 }, async (_, i) => {
        const r = await t.admin.post("/v1/sandboxes", { project: "shop", name: `run-${i}` });
        if (r.status !== 201) return { ok: false, why: String(r.body?.error?.message).slice(0, 200) };
        const ex = await t.admin.post(`/v1/environments/${r.body.id}/exec`, { cmd: ["true"] });
        const gone = await t.admin.del(`/v1/sandboxes/${r.body.id}`);
        const member = r.body.evidence?.pool?.member as string | undefined;
        return { ok: ex.status === 200 && gone.status === 202, why: `${ex.status} ${gone.status}`, member };
      }),
    );
    expect(episodes.filter((e) => !e.ok)).toEqual([]);
    const claimed = episodes.flatMap((e) => (e.member ? [e.member] : []));
    expect(claimed.length).toBeGreaterThanOrEqual(4);
    expect(new Set(claimed).size).toBe(claimed.length);
    // What is left: alpha and the pool at its size; no sandbox, no stray fork on the host.
    await waitFor(async () => (await pool()).ready === 4 && (await pool()).filling === 0);
    // The destroys answered at once and finish in the background.
    await waitFor(async () => (await t.admin.get("/v1/sandboxes")).body.sandboxes.length === 0);
    const held = [...h.environments.keys()];
    expect(held.filter((k) => !k.startsWith("shop/pool-")).map((k) => k.replace(/-[a-z0-9]+$/, ""))).toEqual([
      "shop/alpha",
    ]);
    expect(held.filter((k) => k.startsWith("shop/pool-"))).toHaveLength(4);
    await t.admin.put("/v1/projects/shop/pool", { size: 0 });
    await waitFor(() => ![...h.environments.keys()].some((k) => k.startsWith("shop/pool-")));
  });
});
