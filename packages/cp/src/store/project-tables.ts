import { DenvError } from "@denv/spec";
import { insert, KyselyTables } from "./kysely-tables.js";
import type { ProjectRecord, TokenRecord } from "./records.js";
import { projectFromRow, tokenFromRow, tokenToRow } from "./rows.js";

/** KyselyStore's tokens and projects (and each project's version numbers). */
export class ProjectTables extends KyselyTables {
  // ---- tokens

  createToken(t: TokenRecord): Promise<void> {
    return insert(`token ${t.name}`, () => this.db.insertInto("tokens").values(tokenToRow(t)).execute());
  }

  async tokenByHash(hash: string): Promise<TokenRecord | undefined> {
    const r = await this.db.selectFrom("tokens").selectAll().where("hash", "=", hash).executeTakeFirst();
    return r && tokenFromRow(r);
  }

  async listTokens(): Promise<TokenRecord[]> {
    const rows = await this.db.selectFrom("tokens").selectAll().orderBy("created_at").execute();
    return rows.map(tokenFromRow);
  }

  async deleteToken(id: string): Promise<boolean> {
    const r = await this.db.deleteFrom("tokens").where("id", "=", id).executeTakeFirst();
    return r.numDeletedRows > 0n;
  }

  // ---- projects

  createProject(p: ProjectRecord): Promise<void> {
    return insert(`project ${p.name}`, () =>
      this.db
        .insertInto("projects")
        .values({
          name: p.name,
          kind: p.kind,
          repo: p.repo ?? null,
          compose_path: p.composePath,
          version_seq: 0,
          created_at: p.createdAt,
        })
        .execute(),
    );
  }

  async getProject(name: string): Promise<ProjectRecord | undefined> {
    const r = await this.db.selectFrom("projects").selectAll().where("name", "=", name).executeTakeFirst();
    return r && projectFromRow(r);
  }

  async listProjects(): Promise<ProjectRecord[]> {
    const rows = await this.db.selectFrom("projects").selectAll().orderBy("name").execute();
    return rows.map(projectFromRow);
  }

  async deleteProject(name: string): Promise<boolean> {
    await this.db.deleteFrom("pools").where("project", "=", name).execute();
    const r = await this.db.deleteFrom("projects").where("name", "=", name).executeTakeFirst();
    return r.numDeletedRows > 0n;
  }

  async nextVersionNumber(project: string): Promise<number> {
    const r = await this.db
      .updateTable("projects")
      .set((eb) => ({ version_seq: eb("version_seq", "+", 1) }))
      .where("name", "=", project)
      .returning("version_seq")
      .executeTakeFirst();
    if (!r) throw new DenvError("not_found", `project ${project} not found`);
    return Number(r.version_seq);
  }
}
