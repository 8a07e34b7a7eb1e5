import { type Kysely, type Migration, type MigrationProvider, sql } from "kysely";

/**
 * The migrations, in code, shared by SQLite and PostgreSQL: only types both understand (text,
 * integer) so one migration list serves both dialects. Append new migrations; never edit one
 * that has shipped.
 */
const migrations: Record<string, Migration> = {
  "0001_initial": {
    async up(db: Kysely<unknown>): Promise<void> {
      await db.schema
        .createTable("tokens")
        .addColumn("id", "text", (c) => c.primaryKey())
        .addColumn("name", "text", (c) => c.notNull())
        .addColumn("role", "text", (c) => c.notNull())
        .addColumn("project", "text")
        .addColumn("hash", "text", (c) => c.notNull().unique())
        .addColumn("created_at", "text", (c) => c.notNull())
        .execute();

      await db.schema
        .createTable("projects")
        .addColumn("name", "text", (c) => c.primaryKey())
        .addColumn("kind", "text", (c) => c.notNull())
        .addColumn("repo", "text")
        .addColumn("compose_path", "text", (c) => c.notNull())
        .addColumn("version_seq", "integer", (c) => c.notNull().defaultTo(0))
        .addColumn("created_at", "text", (c) => c.notNull())
        .execute();

      await db.schema
        .createTable("environments")
        .addColumn("id", "text", (c) => c.primaryKey())
        .addColumn("project", "text", (c) => c.notNull())
        .addColumn("name", "text", (c) => c.notNull())
        .addColumn("host_id", "text")
        .addColumn("host_env", "text")
        .addColumn("status", "text", (c) => c.notNull())
        .addColumn("version", "text")
        .addColumn("parent_version", "text")
        .addColumn("sandbox", "integer", (c) => c.notNull().defaultTo(0))
        .addColumn("expires_at", "text")
        .addColumn("services", "text", (c) => c.notNull())
        .addColumn("agent", "text")
        .addColumn("evidence", "text")
        .addColumn("created_at", "text", (c) => c.notNull())
        .addColumn("updated_at", "text", (c) => c.notNull())
        .execute();
      await db.schema.createIndex("environments_project").on("environments").column("project").execute();
      await db.schema.createIndex("environments_host").on("environments").column("host_id").execute();

      await db.schema
        .createTable("deployments")
        .addColumn("id", "text", (c) => c.primaryKey())
        .addColumn("kind", "text", (c) => c.notNull())
        .addColumn("project", "text", (c) => c.notNull())
        .addColumn("environment", "text", (c) => c.notNull())
        .addColumn("status", "text", (c) => c.notNull())
        .addColumn("phases", "text", (c) => c.notNull())
        .addColumn("result", "text")
        .addColumn("error", "text")
        .addColumn("host_id", "text")
        .addColumn("state", "text", (c) => c.notNull())
        .addColumn("created_at", "text", (c) => c.notNull())
        .addColumn("finished_at", "text")
        .execute();
      await db.schema
        .createIndex("deployments_project")
        .on("deployments")
        .columns(["project", "created_at"])
        .execute();
      await db.schema.createIndex("deployments_status").on("deployments").column("status").execute();

      await db.schema
        .createTable("deployment_logs")
        .addColumn("deployment_id", "text", (c) => c.notNull())
        .addColumn("seq", "integer", (c) => c.notNull())
        .addColumn("ts", "text", (c) => c.notNull())
        .addColumn("event", "text", (c) => c.notNull())
        .addColumn("data", "text", (c) => c.notNull())
        .addPrimaryKeyConstraint("deployment_logs_pk", ["deployment_id", "seq"])
        .execute();

      await db.schema
        .createTable("versions")
        .addColumn("id", "text", (c) => c.primaryKey())
        .addColumn("project", "text", (c) => c.notNull())
        .addColumn("number", "integer", (c) => c.notNull())
        .addColumn("host_id", "text", (c) => c.notNull())
        .addColumn("source_environment", "text", (c) => c.notNull())
        .addColumn("parent_version", "text")
        .addColumn("digests", "text", (c) => c.notNull())
        .addColumn("volumes", "text", (c) => c.notNull())
        .addColumn("method", "text", (c) => c.notNull())
        .addColumn("sizes", "text", (c) => c.notNull())
        .addColumn("timings", "text", (c) => c.notNull())
        .addColumn("created_at", "text", (c) => c.notNull())
        .addUniqueConstraint("versions_project_number", ["project", "number"])
        .execute();

      await db.schema
        .createTable("targets")
        .addColumn("name", "text", (c) => c.primaryKey())
        .addColumn("kind", "text", (c) => c.notNull())
        .addColumn("created_at", "text", (c) => c.notNull())
        .execute();

      await db.schema
        .createTable("hosts")
        .addColumn("id", "text", (c) => c.primaryKey())
        .addColumn("target", "text", (c) => c.notNull())
        .addColumn("credential_hash", "text", (c) => c.notNull().unique())
        .addColumn("status", "text", (c) => c.notNull())
        .addColumn("version", "text")
        .addColumn("labels", "text", (c) => c.notNull())
        .addColumn("capacity", "text")
        .addColumn("last_seen_at", "text")
        .addColumn("created_at", "text", (c) => c.notNull())
        .execute();

      await db.schema
        .createTable("join_tokens")
        .addColumn("id", "text", (c) => c.primaryKey())
        .addColumn("target", "text", (c) => c.notNull())
        .addColumn("hash", "text", (c) => c.notNull().unique())
        .addColumn("uses_left", "integer", (c) => c.notNull())
        .addColumn("expires_at", "text", (c) => c.notNull())
        .addColumn("created_at", "text", (c) => c.notNull())
        .execute();
    },
  },
  // Hosts an admin drained (placement skips them) and join tokens an admin revoked (kept, so a
  // join with one is refused as revoked rather than as unknown).
  "0002_drain_and_revoke": {
    async up(db: Kysely<unknown>): Promise<void> {
      await db.schema.alterTable("hosts").addColumn("draining_at", "text").execute();
      await db.schema.alterTable("join_tokens").addColumn("revoked_at", "text").execute();
    },
  },
  // A version can live on several hosts (sent from one to another for a fork): one row per host
  // holding it. versions.host_id stays the origin; every existing version is held by its origin.
  "0003_version_replicas": {
    async up(db: Kysely<unknown>): Promise<void> {
      await db.schema
        .createTable("version_replicas")
        .addColumn("version_id", "text", (c) => c.notNull())
        .addColumn("host_id", "text", (c) => c.notNull())
        .addColumn("created_at", "text", (c) => c.notNull())
        .addPrimaryKeyConstraint("version_replicas_pk", ["version_id", "host_id"])
        .execute();
      await db.schema.createIndex("version_replicas_host").on("version_replicas").column("host_id").execute();
      // Stamped now by the cp's clock, as every replica is (a hello reconciles those recorded
      // before it); versions.created_at is the capturing host's clock.
      const now = new Date().toISOString();
      await sql`insert into version_replicas (version_id, host_id, created_at) select id, host_id, ${now} from versions`.execute(
        db,
      );
    },
  },
  // Warm fork pools: an environment kept started and probed for a sandbox claim is marked
  // `pool`; a project's pool size comes from its file (x-denv.pool) or an admin's override.
  "0004_pools": {
    async up(db: Kysely<unknown>): Promise<void> {
      await db.schema
        .alterTable("environments")
        .addColumn("pool", "integer", (c) => c.notNull().defaultTo(0))
        .execute();
      await db.schema
        .createTable("pools")
        .addColumn("project", "text", (c) => c.primaryKey())
        .addColumn("size_file", "integer")
        .addColumn("size_set", "integer")
        .addColumn("updated_at", "text", (c) => c.notNull())
        .execute();
    },
  },
  // An episode's command log: what the cp asked of an environment through exec and files, with
  // the host's answer (digests, never env values), and the stdin or tar bytes a replay sends again.
  "0006_episode_log": {
    async up(db: Kysely<unknown>): Promise<void> {
      await db.schema
        .createTable("episode_steps")
        .addColumn("environment", "text", (c) => c.notNull())
        .addColumn("seq", "integer", (c) => c.notNull())
        .addColumn("step", "text", (c) => c.notNull())
        .addColumn("kept", "text")
        .addPrimaryKeyConstraint("episode_steps_pk", ["environment", "seq"])
        .execute();
    },
  },
  // Targets beyond hosts: each target's settings (JSON) and its credentials sealed with the cp's
  // credential key (AES-256-GCM, never plaintext); the machines a provisioned target created.
  "0007_target_drivers": {
    async up(db: Kysely<unknown>): Promise<void> {
      await db.schema.alterTable("targets").addColumn("settings", "text").execute();
      await db.schema.alterTable("targets").addColumn("credentials", "text").execute();
      await db.schema
        .createTable("machines")
        .addColumn("id", "text", (c) => c.primaryKey())
        .addColumn("target", "text", (c) => c.notNull())
        .addColumn("provider_id", "text")
        .addColumn("status", "text", (c) => c.notNull())
        .addColumn("cost_class", "text", (c) => c.notNull())
        .addColumn("host_id", "text")
        .addColumn("join_token_id", "text")
        .addColumn("error", "text")
        .addColumn("idle_since", "text")
        .addColumn("created_at", "text", (c) => c.notNull())
        .addColumn("updated_at", "text", (c) => c.notNull())
        .execute();
      await db.schema.createIndex("machines_target").on("machines").column("target").execute();
    },
  },
  // Each replay of an episode (issue 13): the episode environment, the replayed fork, the version,
  // when, by which token, and each step's status (JSON; no output bytes). Deleted with the episode.
  "0008_replays": {
    async up(db: Kysely<unknown>): Promise<void> {
      await db.schema
        .createTable("replays")
        .addColumn("id", "text", (c) => c.primaryKey())
        .addColumn("environment", "text", (c) => c.notNull())
        .addColumn("environment_name", "text", (c) => c.notNull())
        .addColumn("fork", "text", (c) => c.notNull())
        .addColumn("version", "text", (c) => c.notNull())
        .addColumn("token_id", "text", (c) => c.notNull())
        .addColumn("diverged", "integer", (c) => c.notNull())
        .addColumn("diverged_at", "integer")
        .addColumn("steps", "text", (c) => c.notNull())
        .addColumn("created_at", "text", (c) => c.notNull())
        .execute();
      await db.schema.createIndex("replays_environment").on("replays").column("environment").execute();
    },
  },
  // GitHub push-to-deploy: which repository (and branch) each project is connected to, the
  // deliveries already handled (GitHub re-sends on timeouts; each is acted on once), and the check
  // run of each deployment a push started (so a restarted cp completes it).
  "0005_github": {
    async up(db: Kysely<unknown>): Promise<void> {
      await db.schema
        .createTable("github_connections")
        .addColumn("project", "text", (c) => c.primaryKey())
        .addColumn("repository", "text", (c) => c.notNull().unique())
        .addColumn("branch", "text", (c) => c.notNull())
        .addColumn("installation_id", "integer")
        .addColumn("clone_url", "text", (c) => c.notNull())
        .addColumn("created_at", "text", (c) => c.notNull())
        .execute();
      await db.schema
        .createTable("github_deliveries")
        .addColumn("id", "text", (c) => c.primaryKey())
        .addColumn("event", "text", (c) => c.notNull())
        .addColumn("outcome", "text", (c) => c.notNull())
        .addColumn("deployment_id", "text")
        .addColumn("received_at", "text", (c) => c.notNull())
        .execute();
      await db.schema
        .createTable("github_check_runs")
        .addColumn("deployment_id", "text", (c) => c.primaryKey())
        .addColumn("repository", "text", (c) => c.notNull())
        .addColumn("installation_id", "integer", (c) => c.notNull())
        .addColumn("head_sha", "text", (c) => c.notNull())
        .addColumn("name", "text", (c) => c.notNull())
        .addColumn("check_run_id", "integer")
        .addColumn("completed", "integer", (c) => c.notNull().defaultTo(0))
        .addColumn("created_at", "text", (c) => c.notNull())
        .execute();
    },
  },
};

export const migrationProvider: MigrationProvider = {
  getMigrations: () => Promise.resolve(migrations),
};
