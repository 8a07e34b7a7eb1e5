import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type PostgresServer, startPostgres } from "../testing/postgres.js";
import { openStore } from "./open-store.js";
import type { DeploymentRecord, EnvironmentRecord, HostRecord } from "./records.js";
import type { Store } from "./store.js";

/** One suite, run against a SQLite file and a real PostgreSQL server. */

const now = () => new Date().toISOString();

function env(id: string, extra: Partial<EnvironmentRecord> = {}): EnvironmentRecord {
  const [project = "", name = ""] = id.split("/");
  return {
    id,
    project,
    name,
    status: "running",
    sandbox: false,
    services: [],
    createdAt: now(),
    updatedAt: now(),
    ...extra,
  };
}

function deployment(id: string, extra: Partial<DeploymentRecord> = {}): DeploymentRecord {
  return {
    id,
    kind: "deploy",
    project: "shop",
    environment: "shop/alpha",
    status: "queued",
    phases: [{ name: "place", status: "pending" }],
    state: { request: { a: 1 }, steps: {} },
    createdAt: now(),
    ...extra,
  };
}

function storeSuite(
  name: string,
  open: () => Promise<{ store: Store; reopen: () => Promise<Store>; done: () => Promise<void> }>,
) {
  describe(name, () => {
    let store: Store;
    let reopen: () => Promise<Store>;
    let done: () => Promise<void>;
    beforeAll(async () => {
      ({ store, reopen, done } = await open());
    });
    afterAll(async () => {
      await store.close();
      await done();
    });

    it("migrates twice without harm (the same migrations on every start)", async () => {
      await store.migrate();
      await store.migrate();
    });

    it("tokens: stored by hash, found by hash, deleted", async () => {
      await store.createToken({
        id: "tok_1",
        name: "ci",
        role: "member",
        project: "shop",
        hash: "h1",
        createdAt: now(),
      });
      expect(await store.tokenByHash("h1")).toMatchObject({ id: "tok_1", role: "member", project: "shop" });
      expect(await store.tokenByHash("nope")).toBeUndefined();
      await expect(
        store.createToken({ id: "tok_2", name: "x", role: "admin", hash: "h1", createdAt: now() }),
      ).rejects.toMatchObject({ code: "conflict" });
      expect((await store.listTokens()).map((t) => t.id)).toEqual(["tok_1"]);
      expect(await store.deleteToken("tok_1")).toBe(true);
      expect(await store.deleteToken("tok_1")).toBe(false);
    });

    it("projects: unique names and per-project version numbers that are never reused", async () => {
      await store.createProject({
        name: "shop",
        kind: "rl-environment",
        composePath: "compose.yaml",
        createdAt: now(),
      });
      await expect(
        store.createProject({ name: "shop", kind: "service", composePath: "c.yaml", createdAt: now() }),
      ).rejects.toMatchObject({ code: "conflict" });
      const numbers = await Promise.all([1, 2, 3, 4, 5].map(() => store.nextVersionNumber("shop")));
      expect(numbers.sort()).toEqual([1, 2, 3, 4, 5]);
      await expect(store.nextVersionNumber("ghost")).rejects.toMatchObject({ code: "not_found" });
      expect((await store.getProject("shop"))?.repo).toBeUndefined();
    });

    it("environments: upsert, filters, JSON fields round-trip", async () => {
      const services = [{ name: "api", container_id: "c1", image: "i", image_id: "sha256:1" }];
      await store.putEnvironment(
        env("shop/alpha", { hostId: "h1", hostEnv: "alpha-abc", services, evidence: { a: { b: 1 } } }),
      );
      await store.putEnvironment(env("shop/sbx", { sandbox: true, expiresAt: "2000-01-01T00:00:00.000Z" }));
      await store.putEnvironment(env("other/alpha"));
      await store.putEnvironment(
        env("shop/alpha", { hostId: "h2", hostEnv: "alpha-def", services, version: "shop@v1" }),
      );
      const alpha = await store.getEnvironment("shop/alpha");
      expect(alpha).toMatchObject({ hostId: "h2", hostEnv: "alpha-def", version: "shop@v1", services });
      expect(alpha?.evidence).toBeUndefined();
      expect((await store.listEnvironments({ project: "shop" })).map((e) => e.id).sort()).toEqual([
        "shop/alpha",
        "shop/sbx",
      ]);
      expect((await store.listEnvironments({ hostId: "h2" })).map((e) => e.id)).toEqual(["shop/alpha"]);
      await store.putEnvironment(env("other/beta", { hostId: "h2", hostEnv: "beta-1" }));
      // Environments without a host (pending, sandboxes not placed yet) are not counted.
      expect(await store.countEnvironmentsByHost()).toEqual(new Map([["h2", 2]]));
      await store.deleteEnvironment("other/beta");
      expect(
        (await store.listEnvironments({ sandbox: true, expiredBefore: now() })).map((e) => e.id),
      ).toEqual(["shop/sbx"]);
      await store.deleteEnvironment("other/alpha");
      expect(await store.getEnvironment("other/alpha")).toBeUndefined();
    });

    it("deployments and their log: newest first, by status, counts, ordered log", async () => {
      await store.createDeployment(deployment("dep_a", { createdAt: "2026-01-01T00:00:00.000Z" }));
      await store.createDeployment(
        deployment("dep_b", { createdAt: "2026-01-02T00:00:00.000Z", status: "running" }),
      );
      const b = await store.getDeployment("dep_b");
      expect(b?.state).toEqual({ request: { a: 1 }, steps: {} });
      if (!b) throw new Error("missing");
      await store.updateDeployment({
        ...b,
        status: "failed",
        error: { code: "timeout", message: "late" },
        result: { x: [1] },
        finishedAt: now(),
      });
      expect(await store.getDeployment("dep_b")).toMatchObject({
        status: "failed",
        error: { code: "timeout" },
        result: { x: [1] },
      });
      expect((await store.listDeployments({ project: "shop" })).map((d) => d.id)).toEqual(["dep_b", "dep_a"]);
      expect((await store.listDeployments({ statuses: ["queued", "running"] })).map((d) => d.id)).toEqual([
        "dep_a",
      ]);
      expect(await store.countDeploymentsByStatus()).toEqual({ queued: 1, failed: 1 });
      for (const seq of [1, 2, 3]) {
        await store.appendLog({
          deploymentId: "dep_a",
          seq,
          ts: now(),
          event: seq === 2 ? "phase" : "log",
          data: { n: seq },
        });
      }
      expect((await store.listLogs("dep_a", 1)).map((l) => [l.seq, l.event, l.data])).toEqual([
        [2, "phase", { n: 2 }],
        [3, "log", { n: 3 }],
      ]);
    });

    it("versions: unique per project and number, newest first", async () => {
      const v = (n: number) => ({
        id: `shop@v${n}`,
        project: "shop",
        number: n,
        host_id: "h1",
        source_environment: "shop/alpha",
        digests: { api: "sha256:x" },
        volumes: { data: { snapshot: "s", bytes: 10 } },
        method: "btrfs",
        sizes: { layer_bytes: 1, volume_bytes: 2 },
        timings: { total_ms: 3 },
        created_at: now(),
      });
      await store.createVersion(v(1));
      await store.createVersion({ ...v(2), parent_version: "shop@v1" });
      await expect(store.createVersion(v(2))).rejects.toMatchObject({ code: "conflict" });
      expect((await store.listVersions("shop")).map((x) => x.number)).toEqual([2, 1]);
      expect(await store.getVersion("shop", 2)).toEqual({
        ...v(2),
        parent_version: "shop@v1",
        created_at: expect.any(String),
      });
      await store.deleteVersion("shop@v1");
      expect(await store.getVersion("shop", 1)).toBeUndefined();
    });

    it("targets, hosts and join tokens: one use at a time, never below zero", async () => {
      await store.createTarget({ name: "gpu", kind: "hosts", createdAt: now() });
      expect((await store.listTargets()).map((t) => t.name)).toContain("gpu");
      await store.createHost({
        id: "h1",
        target: "gpu",
        credentialHash: "ch",
        status: "offline",
        labels: { gpu: "a100" },
        createdAt: now(),
      });
      const h = await store.hostByCredentialHash("ch");
      expect(h).toMatchObject({ id: "h1", labels: { gpu: "a100" } });
      if (!h) throw new Error("missing");
      await store.updateHost({
        ...h,
        status: "online",
        capacity: { cpus: 4, memory_bytes: 8, disk_free_bytes: 9 },
        lastSeenAt: now(),
      });
      expect((await store.listHosts({ target: "gpu" }))[0]).toMatchObject({
        status: "online",
        capacity: { cpus: 4 },
      });
      await store.createJoinToken({
        id: "jt",
        target: "gpu",
        hash: "jh",
        usesLeft: 2,
        expiresAt: now(),
        createdAt: now(),
      });
      const uses = await Promise.all([1, 2, 3, 4].map(() => store.consumeJoinToken("jt")));
      expect(uses.filter(Boolean)).toHaveLength(2);
      expect((await store.joinTokenByHash("jh"))?.usesLeft).toBe(0);
    });

    it("drains and deletes hosts, revokes join tokens: the first time is kept, a hello keeps the drain", async () => {
      expect(await store.drainHost("h1", "2026-01-01T00:00:00.000Z")).toBe(true);
      expect(await store.drainHost("h1", "2027-01-01T00:00:00.000Z")).toBe(true);
      expect(await store.drainHost("nope", now())).toBe(false);
      const h = (await store.getHost("h1")) as HostRecord;
      expect(h.drainingAt).toBe("2026-01-01T00:00:00.000Z");
      // A hello that read the row before the drain writes it back without one.
      const { drainingAt: _d, ...before } = h;
      await store.updateHost({ ...before, status: "offline" });
      expect((await store.getHost("h1"))?.drainingAt).toBe("2026-01-01T00:00:00.000Z");

      await store.createJoinToken({
        id: "jt2",
        target: "gpu",
        hash: "jh2",
        usesLeft: 5,
        expiresAt: now(),
        createdAt: now(),
      });
      expect(await store.revokeJoinToken("local", "jt2", now())).toBe(false);
      expect(await store.revokeJoinToken("gpu", "jt2", "2026-02-02T00:00:00.000Z")).toBe(true);
      expect(await store.revokeJoinToken("gpu", "jt2", "2027-02-02T00:00:00.000Z")).toBe(true);
      expect(await store.consumeJoinToken("jt2")).toBe(false);
      expect((await store.listJoinTokens("gpu")).map((t) => [t.id, t.revokedAt])).toEqual([
        ["jt", undefined],
        ["jt2", "2026-02-02T00:00:00.000Z"],
      ]);

      expect(await store.deleteHost("h1")).toBe(true);
      expect(await store.deleteHost("h1")).toBe(false);
      expect(await store.hostByCredentialHash("ch")).toBeUndefined();
    });

    it("keeps everything across a reopen", async () => {
      await store.close();
      store = await reopen();
      expect((await store.getEnvironment("shop/alpha"))?.hostEnv).toBe("alpha-def");
      expect(await store.nextVersionNumber("shop")).toBe(6);
    });
  });
}

storeSuite("SQLite store (file, WAL)", async () => {
  const dir = await mkdtemp(join(tmpdir(), "denv-store-"));
  const path = join(dir, "denv.db");
  return {
    store: await openStore(path),
    reopen: () => openStore(path),
    done: () => rm(dir, { recursive: true, force: true }),
  };
});

let pg: PostgresServer | undefined;
beforeAll(async () => {
  pg = await startPostgres();
}, 300_000);
afterAll(async () => {
  await pg?.stop();
});

storeSuite("PostgreSQL store (a real server on 127.0.0.1)", async () => {
  if (!pg) throw new Error("postgres did not start");
  const url = pg.url;
  return { store: await openStore(url), reopen: () => openStore(url), done: async () => {} };
});
