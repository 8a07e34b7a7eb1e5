import type { Kysely } from "kysely";
import { nowIso } from "../ids.js";
import { DeploymentTables } from "./deployment-tables.js";
import { insert } from "./kysely-tables.js";
import type { VersionRecord } from "./records.js";
import { versionFromRow, versionToRow } from "./rows.js";
import type { Database } from "./schema.js";

/** The hosts holding a version: its origin first, then by host id. */
async function holdersOf(db: Kysely<Database>, versionId: string): Promise<string[]> {
  const rows = await db
    .selectFrom("version_replicas as r")
    .leftJoin("versions as v", "v.id", "r.version_id")
    .select(["r.host_id as host", "v.host_id as origin"])
    .where("r.version_id", "=", versionId)
    .orderBy("r.host_id")
    .execute();
  const origin = rows.find((r) => r.host === r.origin);
  return origin
    ? [origin.host, ...rows.filter((r) => r !== origin).map((r) => r.host)]
    : rows.map((r) => r.host);
}

/** KyselyStore's versions and the hosts holding a replica of each. */
export class VersionTables extends DeploymentTables {
  // ---- versions

  createVersion(v: VersionRecord): Promise<void> {
    return insert(`version ${v.id}`, () =>
      this.db.transaction().execute(async (trx) => {
        await trx.insertInto("versions").values(versionToRow(v)).execute();
        await trx
          .insertInto("version_replicas")
          .values({ version_id: v.id, host_id: v.host_id, created_at: nowIso() })
          .execute();
      }),
    );
  }

  async getVersion(project: string, number: number): Promise<VersionRecord | undefined> {
    const r = await this.db
      .selectFrom("versions")
      .selectAll()
      .where("project", "=", project)
      .where("number", "=", number)
      .executeTakeFirst();
    return r && versionFromRow(r);
  }

  async listVersions(project: string): Promise<VersionRecord[]> {
    const rows = await this.db
      .selectFrom("versions")
      .selectAll()
      .where("project", "=", project)
      .orderBy("number", "desc")
      .execute();
    return rows.map(versionFromRow);
  }

  async deleteVersion(id: string): Promise<void> {
    await this.db.transaction().execute(async (trx) => {
      await trx.deleteFrom("version_replicas").where("version_id", "=", id).execute();
      await trx.deleteFrom("versions").where("id", "=", id).execute();
    });
  }

  // ---- version replicas

  async putReplica(versionId: string, hostId: string, at: string): Promise<boolean> {
    // One statement: the row goes in only while the version exists.
    await this.db
      .insertInto("version_replicas")
      .columns(["version_id", "host_id", "created_at"])
      .expression((eb) =>
        eb
          .selectFrom("versions")
          .select([
            eb.val(versionId).as("version_id"),
            eb.val(hostId).as("host_id"),
            eb.val(at).as("created_at"),
          ])
          .where("id", "=", versionId),
      )
      .onConflict((oc) => oc.columns(["version_id", "host_id"]).doNothing())
      .execute();
    const r = await this.db
      .selectFrom("version_replicas")
      .select("host_id")
      .where("version_id", "=", versionId)
      .where("host_id", "=", hostId)
      .executeTakeFirst();
    return r !== undefined;
  }

  async listReplicas(versionId: string): Promise<string[]> {
    return holdersOf(this.db, versionId);
  }

  async listReplicasOnHost(hostId: string, recordedBefore?: string): Promise<string[]> {
    let q = this.db.selectFrom("version_replicas").select("version_id").where("host_id", "=", hostId);
    if (recordedBefore !== undefined) q = q.where("created_at", "<", recordedBefore);
    const rows = await q.orderBy("version_id").execute();
    return rows.map((r) => r.version_id);
  }

  deleteReplica(versionId: string, hostId: string): Promise<string[]> {
    return this.db.transaction().execute(async (trx) => {
      // Takes the version's row lock first (PostgreSQL; SQLite has one writer): two holders
      // dropped at once then see each other's deletes, and the origin never moves to a gone one.
      await trx
        .updateTable("versions")
        .set((eb) => ({ host_id: eb.ref("host_id") }))
        .where("id", "=", versionId)
        .execute();
      await trx
        .deleteFrom("version_replicas")
        .where("version_id", "=", versionId)
        .where("host_id", "=", hostId)
        .execute();
      const left = await holdersOf(trx, versionId);
      const next = [...left].sort()[0];
      if (next === undefined) return left;
      const moved = await trx
        .updateTable("versions")
        .set({ host_id: next })
        .where("id", "=", versionId)
        .where("host_id", "=", hostId)
        .executeTakeFirst();
      return moved.numUpdatedRows > 0n ? [next, ...left.filter((h) => h !== next)] : left;
    });
  }
}
