import { insert } from "./kysely-tables.js";
import type { JoinTokenRecord, MachineRecord, TargetRecord } from "./records.js";
import {
  joinTokenFromRow,
  joinTokenToRow,
  machineFromRow,
  machineRow,
  targetFromRow,
  targetRow,
} from "./rows.js";
import { VersionTables } from "./version-tables.js";

/** KyselyStore's targets, the machines provisioned targets made, and join tokens. */
export class TargetTables extends VersionTables {
  // ---- targets

  createTarget(t: TargetRecord): Promise<void> {
    return insert(`target ${t.name}`, () => this.db.insertInto("targets").values(targetRow(t)).execute());
  }

  async getTarget(name: string): Promise<TargetRecord | undefined> {
    const r = await this.db.selectFrom("targets").selectAll().where("name", "=", name).executeTakeFirst();
    return r && targetFromRow(r);
  }

  async listTargets(): Promise<TargetRecord[]> {
    const rows = await this.db.selectFrom("targets").selectAll().orderBy("name").execute();
    return rows.map(targetFromRow);
  }

  async updateTarget(t: TargetRecord): Promise<void> {
    const { name, ...rest } = targetRow(t);
    await this.db.updateTable("targets").set(rest).where("name", "=", name).execute();
  }

  async deleteTarget(name: string): Promise<boolean> {
    await this.db.deleteFrom("machines").where("target", "=", name).execute();
    const r = await this.db.deleteFrom("targets").where("name", "=", name).executeTakeFirst();
    return r.numDeletedRows > 0n;
  }

  // ---- machines

  async putMachine(m: MachineRecord): Promise<void> {
    const row = machineRow(m);
    const { id, ...rest } = row;
    await this.db
      .insertInto("machines")
      .values(row)
      .onConflict((oc) => oc.column("id").doUpdateSet(rest))
      .execute();
  }

  async getMachine(id: string): Promise<MachineRecord | undefined> {
    const r = await this.db.selectFrom("machines").selectAll().where("id", "=", id).executeTakeFirst();
    return r && machineFromRow(r);
  }

  async listMachines(target: string): Promise<MachineRecord[]> {
    const rows = await this.db
      .selectFrom("machines")
      .selectAll()
      .where("target", "=", target)
      .orderBy("created_at")
      .orderBy("id")
      .execute();
    return rows.map(machineFromRow);
  }

  // ---- join tokens

  createJoinToken(t: JoinTokenRecord): Promise<void> {
    return insert(`join token ${t.id}`, () =>
      this.db.insertInto("join_tokens").values(joinTokenToRow(t)).execute(),
    );
  }

  async joinTokenByHash(hash: string): Promise<JoinTokenRecord | undefined> {
    const r = await this.db.selectFrom("join_tokens").selectAll().where("hash", "=", hash).executeTakeFirst();
    return r && joinTokenFromRow(r);
  }

  async listJoinTokens(target: string): Promise<JoinTokenRecord[]> {
    const rows = await this.db
      .selectFrom("join_tokens")
      .selectAll()
      .where("target", "=", target)
      .orderBy("created_at")
      .orderBy("id")
      .execute();
    return rows.map(joinTokenFromRow);
  }

  async revokeJoinToken(target: string, id: string, at: string): Promise<boolean> {
    const r = await this.db
      .updateTable("join_tokens")
      .set((eb) => ({ revoked_at: eb.fn.coalesce("revoked_at", eb.val(at)) }))
      .where("id", "=", id)
      .where("target", "=", target)
      .executeTakeFirst();
    return r.numUpdatedRows > 0n;
  }

  async consumeJoinToken(id: string): Promise<boolean> {
    // One statement, so two hosts racing for the last use cannot both win.
    const r = await this.db
      .updateTable("join_tokens")
      .set((eb) => ({ uses_left: eb("uses_left", "-", 1) }))
      .where("id", "=", id)
      .where("uses_left", ">", 0)
      .where("revoked_at", "is", null)
      .executeTakeFirst();
    return r.numUpdatedRows > 0n;
  }
}
