import { type Kysely, Migrator } from "kysely";
import { type GithubStore, KyselyGithubStore } from "./github-store.js";
import { insert } from "./kysely-tables.js";
import { migrationProvider } from "./migrations.js";
import type { EnvironmentRecord, HostRecord, PoolRecord } from "./records.js";
import { environmentFromRow, environmentToRow, hostFromRow, hostToRow, poolFromRow } from "./rows.js";
import type { Database } from "./schema.js";
import type { EnvironmentFilter, Store } from "./store.js";
import { TargetTables } from "./target-tables.js";

/**
 * The Store over Kysely; the dialect (SQLite or PostgreSQL) is chosen by `openStore`. Services
 * call one flat Store, so its table groups are layers, each in a file of its own and stacked
 * (project-, deployment-, version-, target-tables.ts, then this one); the order of the stack
 * means nothing, no group calls another. The hosts and environments stay here:
 * services/host-list-cache.test.ts reads this file for every method that writes their rows.
 */
export class KyselyStore extends TargetTables implements Store {
  readonly github: GithubStore;

  constructor(db: Kysely<Database>) {
    super(db);
    this.github = new KyselyGithubStore(db as Kysely<unknown>);
  }

  async migrate(): Promise<void> {
    const { error, results } = await new Migrator({
      db: this.db,
      provider: migrationProvider,
    }).migrateToLatest();
    const failed = results?.find((r) => r.status === "Error");
    if (error || failed) {
      throw new Error(`store migration ${failed?.migrationName ?? ""} failed: ${String(error)}`);
    }
  }

  close(): Promise<void> {
    return this.db.destroy();
  }

  // ---- environments

  async getPool(project: string): Promise<PoolRecord | undefined> {
    const r = await this.db.selectFrom("pools").selectAll().where("project", "=", project).executeTakeFirst();
    return r && poolFromRow(r);
  }

  async listPools(): Promise<PoolRecord[]> {
    return (await this.db.selectFrom("pools").selectAll().orderBy("project").execute()).map(poolFromRow);
  }

  async putPool(p: PoolRecord): Promise<void> {
    const row = {
      project: p.project,
      size_file: p.sizeFile ?? null,
      size_set: p.sizeSet ?? null,
      updated_at: p.updatedAt,
    };
    const { project: _project, ...rest } = row;
    await this.db
      .insertInto("pools")
      .values(row)
      .onConflict((oc) => oc.column("project").doUpdateSet(rest))
      .execute();
  }

  async putEnvironment(e: EnvironmentRecord): Promise<void> {
    const row = environmentToRow(e);
    const { id: _id, ...rest } = row;
    await this.db
      .insertInto("environments")
      .values(row)
      .onConflict((oc) => oc.column("id").doUpdateSet(rest))
      .execute();
  }

  async getEnvironment(id: string): Promise<EnvironmentRecord | undefined> {
    const r = await this.db.selectFrom("environments").selectAll().where("id", "=", id).executeTakeFirst();
    return r && environmentFromRow(r);
  }

  async listEnvironments(filter: EnvironmentFilter = {}): Promise<EnvironmentRecord[]> {
    let q = this.db.selectFrom("environments").selectAll();
    if (filter.project !== undefined) q = q.where("project", "=", filter.project);
    if (filter.hostId !== undefined) q = q.where("host_id", "=", filter.hostId);
    if (filter.sandbox !== undefined) q = q.where("sandbox", "=", filter.sandbox ? 1 : 0);
    if (filter.pool !== undefined) q = q.where("pool", "=", filter.pool ? 1 : 0);
    if (filter.expiredBefore !== undefined) q = q.where("expires_at", "<", filter.expiredBefore);
    const rows = await q.orderBy("created_at").orderBy("id").execute();
    return rows.map(environmentFromRow);
  }

  async countEnvironmentsByHost(): Promise<Map<string, number>> {
    const rows = await this.db
      .selectFrom("environments")
      .select(["host_id", (eb) => eb.fn.countAll<number | string | bigint>().as("n")])
      .where("host_id", "is not", null)
      .groupBy("host_id")
      .execute();
    // PostgreSQL returns count(*) as a string (bigint), SQLite as a number.
    return new Map(rows.map((r) => [r.host_id as string, Number(r.n)]));
  }

  async deleteEnvironment(id: string): Promise<void> {
    await this.db.deleteFrom("episode_steps").where("environment", "=", id).execute();
    await this.db.deleteFrom("replays").where("environment", "=", id).execute();
    await this.db.deleteFrom("environments").where("id", "=", id).execute();
  }
  // ---- hosts

  createHost(h: HostRecord): Promise<void> {
    return insert(`host ${h.id}`, () => this.db.insertInto("hosts").values(hostToRow(h)).execute());
  }

  /** Everything but the drain, which only drainHost sets (a hello racing a drain keeps it). */
  async updateHost(h: HostRecord): Promise<void> {
    const { id, draining_at: _drain, ...rest } = hostToRow(h);
    await this.db.updateTable("hosts").set(rest).where("id", "=", id).execute();
  }

  async getHost(id: string): Promise<HostRecord | undefined> {
    const r = await this.db.selectFrom("hosts").selectAll().where("id", "=", id).executeTakeFirst();
    return r && hostFromRow(r);
  }

  async hostByCredentialHash(hash: string): Promise<HostRecord | undefined> {
    const r = await this.db
      .selectFrom("hosts")
      .selectAll()
      .where("credential_hash", "=", hash)
      .executeTakeFirst();
    return r && hostFromRow(r);
  }

  async listHosts(filter: { target?: string } = {}): Promise<HostRecord[]> {
    let q = this.db.selectFrom("hosts").selectAll();
    if (filter.target !== undefined) q = q.where("target", "=", filter.target);
    const rows = await q.orderBy("created_at").orderBy("id").execute();
    return rows.map(hostFromRow);
  }

  async drainHost(id: string, at: string): Promise<boolean> {
    const r = await this.db
      .updateTable("hosts")
      .set((eb) => ({ draining_at: eb.fn.coalesce("draining_at", eb.val(at)) }))
      .where("id", "=", id)
      .executeTakeFirst();
    return r.numUpdatedRows > 0n;
  }

  async deleteHost(id: string): Promise<boolean> {
    const r = await this.db.deleteFrom("hosts").where("id", "=", id).executeTakeFirst();
    return r.numDeletedRows > 0n;
  }
}
