import { setTimeout as sleep } from "node:timers/promises";

/** What freezing needs of the engine's container client. */
export interface Freezer {
  pause(id: string): Promise<void>;
  unpause(id: string): Promise<void>;
}

export interface FreezeTimings {
  /** How long "unable to freeze" is retried before the snapshot gives up. */
  patienceMs: number;
  /** The wait after the first failed attempt; each next one is half as long again, up to maxWaitMs. */
  firstWaitMs: number;
  maxWaitMs: number;
}

/**
 * runc's cgroup-v1 freezer gives up after a few hundred milliseconds when a task of the container
 * does not freeze in that time: a task in uninterruptible I/O, and above all a `docker exec`
 * being set up (`runc:[2:INIT]`), which Docker's own healthchecks start every interval. With 50
 * quickstart episodes verifying at once on 2 cores (e2e/episodes.test.ts) the execs piled up and
 * six attempts over 6 s all collided with one; an attempt between two execs succeeds.
 */
export const FREEZE_TIMINGS: FreezeTimings = { patienceMs: 20_000, firstWaitMs: 50, maxWaitMs: 500 };

/**
 * Pauses every container, all or none; `frozenAt`: when the attempt that froze them began (the
 * frozen window opens there). A pause that fails thaws the ones that froze before the
 * error is thrown, so that a failed snapshot never leaves part of an environment paused (nor
 * stalls the others while it waits). "unable to freeze" is retried until `patienceMs` has
 * passed, after a wait that grows, with jitter so that snapshots that failed together do not try
 * again together; any other failure is not retried.
 */
export async function freezeAll(
  engine: Freezer,
  ids: string[],
  timings: FreezeTimings = FREEZE_TIMINGS,
): Promise<{ attempts: number; frozenAt: number }> {
  const giveUpAt = Date.now() + timings.patienceMs;
  let wait = timings.firstWaitMs;
  for (let attempt = 1; ; attempt++) {
    const frozenAt = Date.now();
    const results = await Promise.allSettled(ids.map((id) => engine.pause(id)));
    const failure = results.find((r): r is PromiseRejectedResult => r.status === "rejected");
    if (!failure) return { attempts: attempt, frozenAt };
    const frozen = ids.filter((_, i) => results[i]?.status === "fulfilled");
    await Promise.all(frozen.map((id) => engine.unpause(id).catch(() => undefined)));
    const message = failure.reason instanceof Error ? failure.reason.message : String(failure.reason);
    if (Date.now() >= giveUpAt || !/unable to freeze/i.test(message)) throw failure.reason;
    await sleep(wait * (0.5 + Math.random()));
    wait = Math.min(wait * 1.5, timings.maxWaitMs);
  }
}
