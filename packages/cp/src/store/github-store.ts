import { type Kysely, sql } from "kysely";

/** The GitHub integration's rows (migration 0005_github), kept apart from the core store's. */

export interface GithubConnectionRecord {
  project: string;
  /** OWNER/REPO, lower-cased (GitHub's names are case-insensitive). */
  repository: string;
  branch: string;
  installationId?: number | undefined;
  cloneUrl: string;
  createdAt: string;
}

export interface CheckRunRecord {
  deploymentId: string;
  repository: string;
  installationId: number;
  headSha: string;
  name: string;
  /** GitHub's id, once the check run was created there. */
  checkRunId?: number | undefined;
  completed: boolean;
  createdAt: string;
}

type GithubTables = {
  github_connections: {
    project: string;
    repository: string;
    branch: string;
    installation_id: number | null;
    clone_url: string;
    created_at: string;
  };
  github_deliveries: {
    id: string;
    event: string;
    outcome: string;
    deployment_id: string | null;
    received_at: string;
  };
  github_check_runs: {
    deployment_id: string;
    repository: string;
    installation_id: number;
    head_sha: string;
    name: string;
    check_run_id: number | null;
    completed: number;
    created_at: string;
  };
};

export interface GithubStore {
  putConnection(c: GithubConnectionRecord): Promise<void>;
  connectionOfProject(project: string): Promise<GithubConnectionRecord | undefined>;
  connectionOfRepository(repository: string): Promise<GithubConnectionRecord | undefined>;
  deleteConnection(project: string): Promise<void>;
  /** Sets (or clears) the installation of the connected repositories among `repositories`. */
  setInstallation(repositories: readonly string[], installationId: number | undefined): Promise<void>;
  /** Clears an installation from every repository that had it (the app was uninstalled). */
  clearInstallation(installationId: number): Promise<void>;

  getDelivery(id: string): Promise<{ outcome: string; deploymentId?: string } | undefined>;
  /** Records a delivery; false when it was recorded already. */
  recordDelivery(d: {
    id: string;
    event: string;
    outcome: string;
    deploymentId?: string;
    at: string;
  }): Promise<boolean>;

  putCheckRun(r: CheckRunRecord): Promise<void>;
  getCheckRun(deploymentId: string): Promise<CheckRunRecord | undefined>;
  listOpenCheckRuns(): Promise<CheckRunRecord[]>;
}

function isUniqueViolation(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  return code === "23505" || code === "SQLITE_CONSTRAINT_PRIMARYKEY" || code === "SQLITE_CONSTRAINT_UNIQUE";
}

const connectionFromRow = (r: GithubTables["github_connections"]): GithubConnectionRecord => ({
  project: r.project,
  repository: r.repository,
  branch: r.branch,
  installationId: r.installation_id === null ? undefined : Number(r.installation_id),
  cloneUrl: r.clone_url,
  createdAt: r.created_at,
});

const checkRunFromRow = (r: GithubTables["github_check_runs"]): CheckRunRecord => ({
  deploymentId: r.deployment_id,
  repository: r.repository,
  installationId: Number(r.installation_id),
  headSha: r.head_sha,
  name: r.name,
  checkRunId: r.check_run_id === null ? undefined : Number(r.check_run_id),
  completed: Number(r.completed) === 1,
  createdAt: r.created_at,
});

export class KyselyGithubStore implements GithubStore {
  private readonly db: Kysely<GithubTables>;

  constructor(db: Kysely<unknown>) {
    this.db = db.withTables<GithubTables>() as unknown as Kysely<GithubTables>;
  }

  async putConnection(c: GithubConnectionRecord): Promise<void> {
    const row = {
      project: c.project,
      repository: c.repository,
      branch: c.branch,
      installation_id: c.installationId ?? null,
      clone_url: c.cloneUrl,
      created_at: c.createdAt,
    };
    const { project: _p, ...rest } = row;
    await this.db
      .insertInto("github_connections")
      .values(row)
      .onConflict((oc) => oc.column("project").doUpdateSet(rest))
      .execute();
  }

  async connectionOfProject(project: string): Promise<GithubConnectionRecord | undefined> {
    const r = await this.db
      .selectFrom("github_connections")
      .selectAll()
      .where("project", "=", project)
      .executeTakeFirst();
    return r && connectionFromRow(r);
  }

  async connectionOfRepository(repository: string): Promise<GithubConnectionRecord | undefined> {
    const r = await this.db
      .selectFrom("github_connections")
      .selectAll()
      .where("repository", "=", repository.toLowerCase())
      .executeTakeFirst();
    return r && connectionFromRow(r);
  }

  async deleteConnection(project: string): Promise<void> {
    await this.db.deleteFrom("github_connections").where("project", "=", project).execute();
  }

  async setInstallation(repositories: readonly string[], installationId: number | undefined): Promise<void> {
    if (repositories.length === 0) return;
    await this.db
      .updateTable("github_connections")
      .set({ installation_id: installationId ?? null })
      .where(
        "repository",
        "in",
        repositories.map((r) => r.toLowerCase()),
      )
      .execute();
  }

  async clearInstallation(installationId: number): Promise<void> {
    await this.db
      .updateTable("github_connections")
      .set({ installation_id: null })
      .where("installation_id", "=", installationId)
      .execute();
  }

  async getDelivery(id: string): Promise<{ outcome: string; deploymentId?: string } | undefined> {
    const r = await this.db
      .selectFrom("github_deliveries")
      .selectAll()
      .where("id", "=", id)
      .executeTakeFirst();
    return r && { outcome: r.outcome, ...(r.deployment_id ? { deploymentId: r.deployment_id } : {}) };
  }

  async recordDelivery(d: {
    id: string;
    event: string;
    outcome: string;
    deploymentId?: string;
    at: string;
  }): Promise<boolean> {
    try {
      await this.db
        .insertInto("github_deliveries")
        .values({
          id: d.id,
          event: d.event,
          outcome: d.outcome,
          deployment_id: d.deploymentId ?? null,
          received_at: d.at,
        })
        .execute();
      return true;
    } catch (err) {
      if (isUniqueViolation(err)) return false;
      throw err;
    }
  }

  async putCheckRun(r: CheckRunRecord): Promise<void> {
    const row = {
      deployment_id: r.deploymentId,
      repository: r.repository,
      installation_id: r.installationId,
      head_sha: r.headSha,
      name: r.name,
      check_run_id: r.checkRunId ?? null,
      completed: r.completed ? 1 : 0,
      created_at: r.createdAt,
    };
    const { deployment_id: _d, ...rest } = row;
    await this.db
      .insertInto("github_check_runs")
      .values(row)
      .onConflict((oc) => oc.column("deployment_id").doUpdateSet(rest))
      .execute();
  }

  async getCheckRun(deploymentId: string): Promise<CheckRunRecord | undefined> {
    const r = await this.db
      .selectFrom("github_check_runs")
      .selectAll()
      .where("deployment_id", "=", deploymentId)
      .executeTakeFirst();
    return r && checkRunFromRow(r);
  }

  async listOpenCheckRuns(): Promise<CheckRunRecord[]> {
    const rows = await this.db
      .selectFrom("github_check_runs")
      .selectAll()
      .where("completed", "=", 0)
      .orderBy(sql`created_at`)
      .execute();
    return rows.map(checkRunFromRow);
  }
}
