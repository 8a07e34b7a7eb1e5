import { createHash } from "node:crypto";
import { mkdir, readdir, readFile, rm } from "node:fs/promises";
import { join } from "node:path";
import { CommandKind } from "@denv/spec/protocol/commands";
import { ErrorBody } from "@denv/spec/protocol/frames";
import { z } from "zod";
import { writeFileAtomic } from "./atomic-file.js";

/**
 * The command journal: one JSON file per command id under `<state-dir>/journal/`, rewritten
 * atomically at each state (received -> started -> done). It is what makes commands idempotent
 * across reconnects and restarts: a done command answers from here and never runs again, and a
 * command found `started` after a crash is reconciled (reconcile.ts) before the socket opens.
 */

const JournalState = z.enum(["received", "started", "done"]);

export const Outcome = z.discriminatedUnion("ok", [
  z.object({ ok: z.literal(true), result: z.unknown() }),
  z.object({ ok: z.literal(false), error: ErrorBody }),
]);
export type Outcome = z.infer<typeof Outcome>;

export const JournalEntry = z.object({
  id: z.string(),
  kind: CommandKind,
  state: JournalState,
  /** Kept for the kinds that reconciliation needs (what the command was about); see PAYLOAD_KEPT. */
  payload: z.record(z.string(), z.unknown()).optional(),
  deadline: z.number(),
  received_at: z.string(),
  started_at: z.string().optional(),
  done_at: z.string().optional(),
  outcome: Outcome.optional(),
});
export type JournalEntry = z.infer<typeof JournalEntry>;

/**
 * Payloads are not kept for exec and files: they may carry an agent's stdin or environment
 * variables, and reconciliation does not need them.
 */
const PAYLOAD_KEPT = new Set<CommandKind>([
  "env.deploy",
  "env.fork",
  "env.restore",
  "env.snapshot",
  "env.verify",
  "env.stop",
  "env.start",
  "env.destroy",
  "version.delete",
]);

/**
 * What an agent's commands print is not written to disk (docs/explanation/data-handling.md):
 * the journal keeps exec and logs results without their output, marked so.
 */
const OUTPUT_NOT_KEPT = new Set<CommandKind>(["env.exec", "env.logs"]);

function kept(kind: CommandKind, outcome: Outcome): Outcome {
  if (
    !outcome.ok ||
    !OUTPUT_NOT_KEPT.has(kind) ||
    typeof outcome.result !== "object" ||
    outcome.result === null
  ) {
    return outcome;
  }
  return { ok: true, result: { ...outcome.result, stdout: "", stderr: "", output_kept: false } };
}

/** Done entries are kept this long: long enough for any re-send after a reconnect. */
export const DONE_RETENTION_MS = 24 * 60 * 60 * 1000;

export class Journal {
  private constructor(readonly dir: string) {}

  /** `create: false` reads a journal that may not exist yet (denvd status) without making it. */
  static async open(dir: string, opts: { create?: boolean } = {}): Promise<Journal> {
    if (opts.create ?? true) await mkdir(dir, { recursive: true, mode: 0o700 });
    return new Journal(dir);
  }

  /** Command ids are the control plane's strings: hashed into file names, kept inside. */
  private file(id: string): string {
    return join(this.dir, `${createHash("sha256").update(id).digest("hex").slice(0, 32)}.json`);
  }

  async get(id: string): Promise<JournalEntry | undefined> {
    try {
      return JournalEntry.parse(JSON.parse(await readFile(this.file(id), "utf8")));
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === "ENOENT") return undefined;
      throw err;
    }
  }

  async all(): Promise<JournalEntry[]> {
    const names = (
      await readdir(this.dir).catch((err: NodeJS.ErrnoException) => {
        if (err.code === "ENOENT") return [] as string[];
        throw err;
      })
    ).filter((n) => n.endsWith(".json"));
    const entries = await Promise.all(
      names.map(async (n) => {
        try {
          return JournalEntry.parse(JSON.parse(await readFile(join(this.dir, n), "utf8")));
        } catch {
          // Atomic writes leave no torn files; an unreadable one is not ours to act on.
          return undefined;
        }
      }),
    );
    return entries.filter((e): e is JournalEntry => e !== undefined);
  }

  private async put(entry: JournalEntry): Promise<JournalEntry> {
    await writeFileAtomic(this.file(entry.id), JSON.stringify(entry), 0o600);
    return entry;
  }

  received(cmd: {
    id: string;
    kind: CommandKind;
    payload: Record<string, unknown>;
    deadline: number;
  }): Promise<JournalEntry> {
    return this.put({
      id: cmd.id,
      kind: cmd.kind,
      state: "received",
      ...(PAYLOAD_KEPT.has(cmd.kind) ? { payload: withoutCredentials(cmd.payload) } : {}),
      deadline: cmd.deadline,
      received_at: new Date().toISOString(),
    });
  }

  started(entry: JournalEntry): Promise<JournalEntry> {
    return this.put({ ...entry, state: "started", started_at: new Date().toISOString() });
  }

  done(entry: JournalEntry, outcome: Outcome): Promise<JournalEntry> {
    return this.put({
      ...entry,
      state: "done",
      done_at: new Date().toISOString(),
      outcome: kept(entry.kind, outcome),
    });
  }

  /** Ids journalled but not done, for the hello frame. */
  async unfinished(): Promise<string[]> {
    return (await this.all()).filter((e) => e.state !== "done").map((e) => e.id);
  }

  /** Removes done entries older than `retentionMs`; returns how many. */
  async prune(now = Date.now(), retentionMs = DONE_RETENTION_MS): Promise<number> {
    let removed = 0;
    for (const e of await this.all()) {
      if (e.state === "done" && e.done_at && now - Date.parse(e.done_at) > retentionMs) {
        await rm(this.file(e.id), { force: true });
        removed++;
      }
    }
    return removed;
  }
}

/** A deploy's git authorization (an installation token) is used, never written to disk. */
function withoutCredentials(payload: Record<string, unknown>): Record<string, unknown> {
  const git = payload.git;
  if (typeof git !== "object" || git === null || !("authorization" in git)) return payload;
  const { authorization: _, ...rest } = git as Record<string, unknown>;
  return { ...payload, git: rest };
}
