import pgDriver from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type PostgresServer, startPostgres } from "../testing/postgres.js";
import { openStore } from "./open-store.js";

/** A real PostgreSQL on 127.0.0.1 that ends the store's connections, as a restart or a failover does. */
let pg: PostgresServer | undefined;
beforeAll(async () => {
  pg = await startPostgres();
}, 300_000);
afterAll(async () => {
  await pg?.stop();
});

describe("PostgreSQL store when the server ends a connection", () => {
  it("drops it, says so, and the next query connects again (a restart must not end the process)", async () => {
    if (!pg) throw new Error("postgres did not start");
    const lost: string[] = [];
    const store = await openStore(pg.url, { onConnectionError: (err) => lost.push(err.message) });
    try {
      await store.createTarget({ name: "ended", kind: "hosts", createdAt: new Date().toISOString() });
      // The store's connections are idle in the pool now: the server ends every one of them.
      const admin = new pgDriver.Client({ connectionString: pg.url });
      await admin.connect();
      try {
        await admin.query(
          "select pg_terminate_backend(pid) from pg_stat_activity where datname = current_database() and pid <> pg_backend_pid() and backend_type = 'client backend'",
        );
      } finally {
        await admin.end();
      }
      for (let i = 0; i < 100 && lost.length === 0; i++) await new Promise((r) => setTimeout(r, 50));
      expect(lost[0]).toMatch(/terminating connection due to administrator command/);
      expect((await store.getTarget("ended"))?.name).toBe("ended");
    } finally {
      await store.close();
    }
  });
});
