import { setTimeout as sleep } from "node:timers/promises";

/** What freezing needs of the engine's container client. */
export interface Freezer {
  pause(id: string): Promise<void>;
  unpause(id: string): Promise<void>;
}

/** Attempts at freezing before a snapshot gives up, and the wait before the second one. */
export const FREEZE_ATTEMPTS = 3;
const FIRST_RETRY_MS = 200;

/**
 * Pauses every container, all or none. A pause that fails thaws the ones that froze before the
 * error is thrown, so that a failed snapshot never leaves part of an environment paused. The
 * cgroup freezer gives up ("unable to freeze") when a task does not reach the frozen state in
 * time, which a host under heavy I/O causes; that failure is retried, after a wait that doubles,
 * and any other is not.
 */
export async function freezeAll(engine: Freezer, ids: string[]): Promise<{ attempts: number }> {
  for (let attempt = 1; ; attempt++) {
    const results = await Promise.allSettled(ids.map((id) => engine.pause(id)));
    const failure = results.find((r): r is PromiseRejectedResult => r.status === "rejected");
    if (!failure) return { attempts: attempt };
    const frozen = ids.filter((_, i) => results[i]?.status === "fulfilled");
    await Promise.all(frozen.map((id) => engine.unpause(id).catch(() => undefined)));
    const message = failure.reason instanceof Error ? failure.reason.message : String(failure.reason);
    if (attempt >= FREEZE_ATTEMPTS || !/unable to freeze/i.test(message)) throw failure.reason;
    await sleep(FIRST_RETRY_MS * 2 ** (attempt - 1));
  }
}
