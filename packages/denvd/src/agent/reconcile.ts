import type { HostRuntime } from "../runtime/host-runtime.js";
import { errorText } from "./connection.js";
import type { Journal, JournalEntry, Outcome } from "./journal.js";
import type { Log } from "./log.js";

/**
 * After a crash, commands the journal holds as `started` are settled before the socket opens,
 * from what the runtime finds of them (HostRuntime.settle): finished -> done with its result;
 * half done -> what it created is removed, done with `interrupted`. Either way the command is
 * done and never runs again.
 */

const ROLLED_BACK = "denvd restarted during the command; what it created was removed";
const STOPPED = "denvd restarted during the command; send it again under a new id to retry";

const interrupted = (message: string): Outcome => ({ ok: false, error: { code: "interrupted", message } });

export async function reconcile(rt: HostRuntime, journal: Journal, log: Log): Promise<JournalEntry[]> {
  const settled: JournalEntry[] = [];
  for (const entry of await journal.all()) {
    if (entry.state !== "started") continue;
    let outcome: Outcome;
    try {
      outcome = await settle(rt, entry);
    } catch (err) {
      outcome = interrupted(`${STOPPED} (reconciling failed: ${errorText(err)})`);
    }
    settled.push(await journal.done(entry, outcome));
    log("command reconciled", {
      id: entry.id,
      kind: entry.kind,
      ok: outcome.ok,
      ...(outcome.ok ? {} : { message: outcome.error.message }),
    });
  }
  return settled;
}

async function settle(rt: HostRuntime, entry: JournalEntry): Promise<Outcome> {
  // Loaded only when a crash left a command to settle (as the agent loads it at a command).
  const { checkedResult } = await import("./checked-result.js");
  const environment = typeof entry.payload?.environment === "string" ? entry.payload.environment : undefined;
  const settled = await rt.settle({ id: entry.id, kind: entry.kind, environment });
  if (settled.done) return checkedResult(entry.kind, settled.result);
  return interrupted(settled.rolledBack ? ROLLED_BACK : STOPPED);
}
