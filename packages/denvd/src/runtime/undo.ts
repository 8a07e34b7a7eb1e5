import { DenvError } from "@denv/spec";

/**
 * Undo steps of an operation in progress, run newest first when it fails. Every step runs even
 * when an earlier one failed; their errors are returned, never swallowed, so the caller can
 * report what could not be removed.
 */
export class Undo {
  private steps: Array<{ what: string; step: () => Promise<unknown> }> = [];

  push(what: string, step: () => Promise<unknown>): void {
    this.steps.push({ what, step });
  }

  /** Runs every step; returns one line per step that failed. */
  async run(): Promise<string[]> {
    const failed: string[] = [];
    for (const { what, step } of this.steps.reverse()) {
      try {
        await step();
      } catch (err) {
        failed.push(`${what}: ${err instanceof Error ? err.message : String(err)}`);
      }
    }
    this.steps = [];
    return failed;
  }
}

/**
 * Runs `fn` with a fresh Undo; when it throws, runs the undo steps and rethrows. Undo steps that
 * failed are logged and travel with the error as its details (gc removes what they left).
 */
export async function undoable<T>(log: (line: string) => void, fn: (undo: Undo) => Promise<T>): Promise<T> {
  const undo = new Undo();
  try {
    return await fn(undo);
  } catch (err) {
    const failed = await undo.run();
    if (failed.length === 0) throw err;
    log(`rollback left ${failed.length} behind (gc retries): ${failed.join("; ")}`);
    const e = err instanceof DenvError ? err : new DenvError("internal", (err as Error).message);
    throw new DenvError(e.code, e.message, [...e.details, ...failed.map((f) => `rollback: ${f}`)]);
  }
}

/**
 * Like Promise.all, but waits for every promise to settle before it throws the first failure:
 * steps that run side by side have all pushed their undo steps (or finished) by the time a
 * rollback runs, so none creates something after it.
 */
export async function settleAll<T extends readonly unknown[] | []>(
  values: T,
): Promise<{ -readonly [P in keyof T]: Awaited<T[P]> }> {
  const results = (await Promise.allSettled(values)) as PromiseSettledResult<unknown>[];
  for (const r of results) if (r.status === "rejected") throw r.reason;
  return results.map((r) => (r as PromiseFulfilledResult<unknown>).value) as {
    -readonly [P in keyof T]: Awaited<T[P]>;
  };
}
