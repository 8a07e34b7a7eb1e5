import { DenvError } from "@denv/spec";
import { type Kysely, Migrator } from "kysely";
import { nowIso } from "../ids.js";
import { type GithubStore, KyselyGithubStore } from "./github-store.js";
import { migrationProvider } from "./migrations.js";
import type {
  DeploymentRecord,
  DeploymentStatus,
  EnvironmentRecord,
  EpisodeStepRecord,
  HostRecord,
  JoinTokenRecord,
  LogRecord,
  MachineRecord,
  PoolRecord,
  ProjectRecord,
  ReplayRecord,
  TargetRecord,
  TokenRecord,
  VersionRecord,
} from "./records.js";
import {
  deploymentFromRow,
  deploymentToRow,
  environmentFromRow,
  environmentToRow,
  hostFromRow,
  hostToRow,
  joinTokenFromRow,
  joinTokenToRow,
  machineFromRow,
  machineRow,
  poolFromRow,
  projectFromRow,
  targetFromRow,
  targetRow,
  tokenFromRow,
  tokenToRow,
  versionFromRow,
  versionToRow,
} from "./rows.js";
import type { Database } from "./schema.js";
import type { EnvironmentFilter, Store } from "./store.js";

/** SQLite's and PostgreSQL's ways of saying "that key exists". */
function isUniqueViolation(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  return code === "23505" || code === "SQLITE_CONSTRAINT_PRIMARYKEY" || code === "SQLITE_CONSTRAINT_UNIQUE";
}

async function insert(what: string, run: () => Promise<unknown>): Promise<void> {
  try {
    await run();
  } catch (err) {
    if (isUniqueViolation(err)) throw new DenvError("conflict", `${what} exists`);
    throw err;
  }
}

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

/** The Store over Kysely; the dialect (SQLite or PostgreSQL) is chosen by `openStore`. */
export class KyselyStore implements Store {
  readonly github: GithubStore;

  constructor(private readonly db: Kysely<Database>) {
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

  // ---- episode logs

  async putEpisodeStep(r: EpisodeStepRecord): Promise<void> {
    const row = {
      environment: r.environment,
      seq: r.seq,
      step: JSON.stringify(r.data),
      kept: r.kept ? r.kept.toString("base64") : null,
    };
    await this.db
      .insertInto("episode_steps")
      .values(row)
      .onConflict((oc) => oc.columns(["environment", "seq"]).doUpdateSet({ step: row.step, kept: row.kept }))
      .execute();
  }

  async listEpisodeSteps(
    environment: string,
    q: { afterSeq: number; limit: number; kept?: boolean; maxSeq?: number },
  ): Promise<EpisodeStepRecord[]> {
    let query = this.db
      .selectFrom("episode_steps")
      .select(q.kept ? ["seq", "step", "kept"] : ["seq", "step"])
      .where("environment", "=", environment)
      .where("seq", ">", q.afterSeq);
    if (q.maxSeq !== undefined) query = query.where("seq", "<=", q.maxSeq);
    const rows = (await query.orderBy("seq").limit(q.limit).execute()) as Array<{
      seq: number;
      step: string;
      kept?: string | null;
    }>;
    return rows.map((r) => ({
      environment,
      seq: Number(r.seq),
      data: JSON.parse(r.step) as unknown,
      ...(r.kept ? { kept: Buffer.from(r.kept, "base64") } : {}),
    }));
  }

  async lastEpisodeSeq(environment: string): Promise<number> {
    const row = await this.db
      .selectFrom("episode_steps")
      .select((eb) => eb.fn.max("seq").as("last"))
      .where("environment", "=", environment)
      .executeTakeFirst();
    return Number(row?.last ?? 0);
  }

  // ---- replays

  async putReplay(r: ReplayRecord): Promise<void> {
    await this.db
      .insertInto("replays")
      .values({
        id: r.id,
        environment: r.environment,
        environment_name: r.environmentName,
        fork: r.fork,
        version: r.version,
        token_id: r.tokenId,
        diverged: r.diverged,
        diverged_at: r.divergedAt ?? null,
        steps: JSON.stringify(r.steps),
        created_at: r.createdAt,
      })
      .execute();
  }

  async listReplays(environment: string): Promise<ReplayRecord[]> {
    const rows = await this.db
      .selectFrom("replays")
      .selectAll()
      .where("environment", "=", environment)
      .orderBy("created_at", "desc")
      .orderBy("id", "desc")
      .execute();
    return rows.map((r) => ({
      id: r.id,
      environment: r.environment,
      environmentName: r.environment_name,
      fork: r.fork,
      version: r.version,
      tokenId: r.token_id,
      diverged: Number(r.diverged),
      ...(r.diverged_at !== null ? { divergedAt: Number(r.diverged_at) } : {}),
      steps: JSON.parse(r.steps) as unknown,
      createdAt: r.created_at,
    }));
  }

  // ---- deployments

  createDeployment(d: DeploymentRecord): Promise<void> {
    return insert(`deployment ${d.id}`, () =>
      this.db.insertInto("deployments").values(deploymentToRow(d)).execute(),
    );
  }

  async updateDeployment(d: DeploymentRecord): Promise<void> {
    const { id, ...rest } = deploymentToRow(d);
    await this.db.updateTable("deployments").set(rest).where("id", "=", id).execute();
  }

  async getDeployment(id: string): Promise<DeploymentRecord | undefined> {
    const r = await this.db.selectFrom("deployments").selectAll().where("id", "=", id).executeTakeFirst();
    return r && deploymentFromRow(r);
  }

  async listDeployments(filter: {
    project?: string;
    statuses?: DeploymentStatus[];
  }): Promise<DeploymentRecord[]> {
    let q = this.db.selectFrom("deployments").selectAll();
    if (filter.project !== undefined) q = q.where("project", "=", filter.project);
    if (filter.statuses !== undefined) q = q.where("status", "in", filter.statuses);
    const rows = await q.orderBy("created_at", "desc").orderBy("id", "desc").execute();
    return rows.map(deploymentFromRow);
  }

  async countDeploymentsByStatus(): Promise<Record<string, number>> {
    const rows = await this.db
      .selectFrom("deployments")
      .select((eb) => ["status", eb.fn.countAll().as("n")])
      .groupBy("status")
      .execute();
    return Object.fromEntries(rows.map((r) => [r.status, Number(r.n)]));
  }

  async appendLog(entry: LogRecord): Promise<void> {
    await this.db
      .insertInto("deployment_logs")
      .values({
        deployment_id: entry.deploymentId,
        seq: entry.seq,
        ts: entry.ts,
        event: entry.event,
        data: JSON.stringify(entry.data),
      })
      .execute();
  }

  async listLogs(deploymentId: string, afterSeq: number): Promise<LogRecord[]> {
    const rows = await this.db
      .selectFrom("deployment_logs")
      .selectAll()
      .where("deployment_id", "=", deploymentId)
      .where("seq", ">", afterSeq)
      .orderBy("seq")
      .execute();
    return rows.map((r) => ({
      deploymentId: r.deployment_id,
      seq: Number(r.seq),
      ts: r.ts,
      event: r.event as LogRecord["event"],
      data: JSON.parse(r.data) as unknown,
    }));
  }

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
