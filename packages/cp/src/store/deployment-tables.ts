import { insert } from "./kysely-tables.js";
import { ProjectTables } from "./project-tables.js";
import type {
  DeploymentRecord,
  DeploymentStatus,
  EpisodeStepRecord,
  LogRecord,
  ReplayRecord,
} from "./records.js";
import { deploymentFromRow, deploymentToRow } from "./rows.js";

/** KyselyStore's episode logs, replays, deployments and their logs. */
export class DeploymentTables extends ProjectTables {
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
}
