import { DenvError } from "@denv/spec";
import type { Kysely } from "kysely";
import type { Database } from "./schema.js";

/** SQLite's and PostgreSQL's ways of saying "that key exists". */
function isUniqueViolation(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  return code === "23505" || code === "SQLITE_CONSTRAINT_PRIMARYKEY" || code === "SQLITE_CONSTRAINT_UNIQUE";
}

/** Inserts, and answers a key that exists already as a conflict naming `what`. */
export async function insert(what: string, run: () => Promise<unknown>): Promise<void> {
  try {
    await run();
  } catch (err) {
    if (isUniqueViolation(err)) throw new DenvError("conflict", `${what} exists`);
    throw err;
  }
}

/**
 * The Kysely database every table group of KyselyStore (kysely-store.ts) works on; one group a
 * layer, one layer a file.
 */
export class KyselyTables {
  constructor(protected readonly db: Kysely<Database>) {}
}
