import pg from "pg";
import { startPostgres } from "../../../packages/cp/dist/testing/postgres.js";

export const STORES = ["sqlite", "postgres"] as const;
export type StoreKind = (typeof STORES)[number];

/** The store of one load run's control plane, created empty for it and removed after. */
export interface LoadDatabase {
  kind: StoreKind;
  /** The cp's --database-url; undefined: SQLite in its data dir. */
  url: string | undefined;
  /** What the results say it was. */
  describe: string;
  close(): Promise<void>;
}

/**
 * SQLite: the cp's default, a file in its data dir. PostgreSQL: a throwaway cluster (initdb and
 * pg_ctl of Debian's packages, as the cp's tests start one: its testing/postgres.ts), reached
 * over its Unix socket as a server on the same machine usually is (over loopback TCP, each query's
 * send also runs the server side of the TCP stack in the cp's own syscall: a third of its CPU
 * time in the read mix); or, with `postgresUrl`, a new database `name` on that server (dropped
 * at the end).
 */
export async function loadDatabase(
  kind: StoreKind,
  name: string,
  postgresUrl?: string,
): Promise<LoadDatabase> {
  if (kind === "sqlite") {
    return { kind, url: undefined, describe: "SQLite (the data dir's file)", close: async () => {} };
  }
  if (postgresUrl === undefined) {
    const server = await startPostgres();
    return {
      kind,
      url: server.socketUrl,
      describe: "PostgreSQL (a throwaway local cluster, over its Unix socket)",
      close: server.stop,
    };
  }
  const admin = new pg.Client({ connectionString: postgresUrl });
  await admin.connect();
  try {
    await admin.query(`CREATE DATABASE "${name}"`);
  } finally {
    await admin.end();
  }
  const url = new URL(postgresUrl);
  url.pathname = `/${name}`;
  return {
    kind,
    url: url.toString(),
    describe: `PostgreSQL (database ${name} on ${url.host})`,
    close: async () => {
      const c = new pg.Client({ connectionString: postgresUrl });
      await c.connect();
      try {
        await c.query(`DROP DATABASE IF EXISTS "${name}"`);
      } finally {
        await c.end();
      }
    },
  };
}
