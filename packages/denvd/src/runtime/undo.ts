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

/** Runs `fn` with a fresh Undo; when it throws, runs the undo steps, logs their failures and rethrows. */
export async function undoable<T>(log: (line: string) => void, fn: (undo: Undo) => Promise<T>): Promise<T> {
  const undo = new Undo();
  try {
    return await fn(undo);
  } catch (err) {
    const failed = await undo.run();
    if (failed.length > 0) log(`rollback left ${failed.length} behind (gc retries): ${failed.join("; ")}`);
    throw err;
  }
}
