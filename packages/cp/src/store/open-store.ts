import { mkdirSync } from "node:fs";
import { dirname } from "node:path";
import BetterSqlite3 from "better-sqlite3";
import { Kysely, PostgresDialect, SqliteDialect } from "kysely";
import pg from "pg";
import { KyselyStore } from "./kysely-store.js";
import type { Database } from "./schema.js";
import type { Store } from "./store.js";

export interface OpenStoreOptions {
  /**
   * An idle PostgreSQL connection the server ended (a restart, a failover, an admin's
   * pg_terminate_backend): the pool drops it and the next query connects again. Without a
   * listener, the pool's error event would end the process.
   */
  onConnectionError?: (err: Error) => void;
}

/**
 * Opens the store named by `databaseUrl`: `postgres://` / `postgresql://` URLs use a pg Pool,
 * anything else is a SQLite file path (WAL, so readers never wait for the writer). Migrates
 * before returning.
 */
export async function openStore(databaseUrl: string, o: OpenStoreOptions = {}): Promise<Store> {
  const store = new KyselyStore(new Kysely<Database>({ dialect: dialectFor(databaseUrl, o) }));
  try {
    await store.migrate();
  } catch (err) {
    await store.close();
    throw err;
  }
  return store;
}

function dialectFor(databaseUrl: string, o: OpenStoreOptions): SqliteDialect | PostgresDialect {
  if (/^postgres(ql)?:\/\//.test(databaseUrl)) {
    const pool = new pg.Pool({ connectionString: databaseUrl, max: 10 });
    pool.on("error", (err) => o.onConnectionError?.(err));
    return new PostgresDialect({ pool });
  }
  const path = databaseUrl.replace(/^sqlite:(\/\/)?/, "");
  if (path !== ":memory:") mkdirSync(dirname(path), { recursive: true });
  const db = new BetterSqlite3(path);
  db.pragma("journal_mode = WAL");
  // A second process (or a test reopening the file) may hold the lock for a moment.
  db.pragma("busy_timeout = 5000");
  return new SqliteDialect({ database: db });
}
