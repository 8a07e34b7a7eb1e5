import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import BetterSqlite3 from "better-sqlite3";
import { Kysely, Migrator, PostgresDialect, SqliteDialect } from "kysely";
import pgDriver from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type PostgresServer, startPostgres } from "../testing/postgres.js";
import { migrationProvider } from "./migrations.js";
import { openStore } from "./open-store.js";
import type { DeploymentRecord, EnvironmentRecord, HostRecord, VersionRecord } from "./records.js";
import { versionToRow } from "./rows.js";
import type { Database } from "./schema.js";
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

function version(id: string, extra: Partial<VersionRecord> = {}): VersionRecord {
  const [project = "", n = "0"] = id.split("@v");
  return {
    id,
    project,
    number: Number(n),
    host_id: "h1",
    source_environment: `${project}/alpha`,
    digests: {},
    volumes: {},
    method: "copy",
    sizes: { layer_bytes: 1, volume_bytes: 2 },
    timings: {},
    created_at: "2026-01-01T00:00:00.000Z",
    ...extra,
  };
}

/** A Kysely on `url` the way openStore opens it, without migrating. */
function rawDb(url: string): Kysely<Database> {
  const dialect = url.startsWith("postgres://")
    ? new PostgresDialect({ pool: new pgDriver.Pool({ connectionString: url, max: 2 }) })
    : new SqliteDialect({ database: new BetterSqlite3(url) });
  return new Kysely<Database>({ dialect });
}

interface Opened {
  store: Store;
  reopen: () => Promise<Store>;
  done: () => Promise<void>;
  /** The URL of another, empty database on the same server (or a new SQLite file). */
  emptyDatabase: () => Promise<string>;
}

function storeSuite(name: string, open: () => Promise<Opened>) {
  describe(name, () => {
    let store: Store;
    let reopen: () => Promise<Store>;
    let done: () => Promise<void>;
    let emptyDatabase: () => Promise<string>;
    beforeAll(async () => {
      ({ store, reopen, done, emptyDatabase } = await open());
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

    it("version replicas: the origin's comes with the version, origin first, the origin moves when it goes", async () => {
      await store.createVersion(version("rep@v1", { host_id: "hb" }));
      expect(await store.listReplicas("rep@v1")).toEqual(["hb"]);
      const at = "2030-01-01T00:00:00.000Z";
      expect(await store.putReplica("rep@v1", "hc", at)).toBe(true);
      expect(await store.putReplica("rep@v1", "ha", at)).toBe(true);
      // Idempotent: the first time is kept.
      expect(await store.putReplica("rep@v1", "ha", "2031-01-01T00:00:00.000Z")).toBe(true);
      expect(await store.listReplicas("rep@v1")).toEqual(["hb", "ha", "hc"]);
      // No such version: nothing is recorded.
      expect(await store.putReplica("rep@v9", "ha", at)).toBe(false);
      expect(await store.listReplicas("rep@v9")).toEqual([]);

      await store.createVersion(version("rep@v2", { host_id: "ha" }));
      expect(await store.listReplicasOnHost("ha")).toEqual(["rep@v1", "rep@v2"]);
      expect(await store.listReplicasOnHost("hb")).toEqual(["rep@v1"]);
      // rep@v2's row was stamped now (before `at`); rep@v1's on ha at `at`.
      expect(await store.listReplicasOnHost("ha", at)).toEqual(["rep@v2"]);
      expect(await store.listReplicasOnHost("nobody")).toEqual([]);

      // A replica that is not the origin goes; the origin stays.
      expect(await store.deleteReplica("rep@v1", "hc")).toEqual(["hb", "ha"]);
      expect((await store.getVersion("rep", 1))?.host_id).toBe("hb");
      // The origin goes: the first holder left by host id becomes it.
      expect(await store.deleteReplica("rep@v1", "hb")).toEqual(["ha"]);
      expect((await store.getVersion("rep", 1))?.host_id).toBe("ha");
      expect(await store.deleteReplica("rep@v1", "nobody")).toEqual(["ha"]);
      // The last one: the version row stays for the caller, held by no one.
      expect(await store.deleteReplica("rep@v1", "ha")).toEqual([]);
      expect((await store.getVersion("rep", 1))?.host_id).toBe("ha");
      expect(await store.listReplicasOnHost("ha")).toEqual(["rep@v2"]);

      // Deleting a version deletes its replicas.
      await store.putReplica("rep@v2", "hd", at);
      await store.deleteVersion("rep@v2");
      expect(await store.listReplicas("rep@v2")).toEqual([]);
      expect(await store.listReplicasOnHost("hd")).toEqual([]);
      // A version of the same id recorded again starts with its origin alone.
      await store.createVersion(version("rep@v2", { host_id: "he" }));
      expect(await store.listReplicas("rep@v2")).toEqual(["he"]);
      // A second record of an existing version is a conflict and adds no replica.
      await expect(store.createVersion(version("rep@v2", { host_id: "hf" }))).rejects.toMatchObject({
        code: "conflict",
      });
      expect(await store.listReplicas("rep@v2")).toEqual(["he"]);
    });

    it("the replicas migration gives every existing version its origin as a replica", async () => {
      const url = await emptyDatabase();
      const db = rawDb(url);
      const before = await new Migrator({ db, provider: migrationProvider }).migrateTo(
        "0002_drain_and_revoke",
      );
      expect(before.error).toBeUndefined();
      await db
        .insertInto("versions")
        .values(versionToRow(version("old@v1", { host_id: "h7" })))
        .execute();
      await db
        .insertInto("versions")
        .values(versionToRow(version("old@v2", { host_id: "h8" })))
        .execute();
      await db.destroy();
      const before3 = new Date().toISOString();
      const migrated = await openStore(url);
      try {
        expect(await migrated.listReplicas("old@v1")).toEqual(["h7"]);
        expect(await migrated.listReplicasOnHost("h8")).toEqual(["old@v2"]);
        // Stamped when the migration ran (the cp's clock), not when the host captured the version.
        expect(await migrated.listReplicasOnHost("h8", before3)).toEqual([]);
        expect(await migrated.listReplicasOnHost("h8", "2999-01-01T00:00:00.000Z")).toEqual(["old@v2"]);
      } finally {
        await migrated.close();
      }
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
  let files = 0;
  return {
    store: await openStore(path),
    reopen: () => openStore(path),
    done: () => rm(dir, { recursive: true, force: true }),
    emptyDatabase: async () => join(dir, `empty-${++files}.db`),
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
  let databases = 0;
  return {
    store: await openStore(url),
    reopen: () => openStore(url),
    done: async () => {},
    emptyDatabase: async () => {
      const name = `empty_${++databases}`;
      const admin = new pgDriver.Client({ connectionString: url });
      await admin.connect();
      try {
        await admin.query(`create database ${name}`);
      } finally {
        await admin.end();
      }
      return url.replace(/\/postgres$/, `/${name}`);
    },
  };
});
