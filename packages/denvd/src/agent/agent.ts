import { isDenvError } from "@denv/spec/errors";
import { type CommandKind, CommandPayloads } from "@denv/spec/protocol/commands";
import {
  type CommandFrame,
  type ErrorBody,
  type Frame,
  PROTOCOL_VERSION,
  type RawFrame,
  type ResultFrame,
} from "@denv/spec/protocol/frames";
import type { z } from "zod";
import type { HostRuntime } from "../runtime/host-runtime.js";
import type { TransferListener } from "../transfer/direct.js";
import { type AbortCode, abortCode, CommandAborted, type CommandContext } from "./command-context.js";
import { errorText } from "./connection.js";
import { buildHello } from "./hello.js";
import type { Journal, JournalEntry, Outcome } from "./journal.js";
import type { Log } from "./log.js";
import { phaseFrames } from "./phase-frames.js";
import { RecentResults } from "./recent-results.js";
import { type SendFrame, StreamRegistry } from "./streams.js";

/** Kinds that change nothing on the host: run again rather than journalled (see process()). */
const UNJOURNALLED = new Set<CommandKind>(["env.probe_egress", "env.logs"]);

/** A command being processed, and its journal entry when it is journalled. */
interface Processing {
  id: string;
  kind: CommandKind;
  journalled: JournalEntry | undefined;
}

/**
 * The host side of the protocol: journals and runs commands, routes stream frames, and answers
 * re-sent commands from the journal. It does not own the socket (connection.ts does); it is
 * told when one opens and closes and sends through whichever is current.
 *
 * A command goes: validate -> journal `received` -> ack -> journal `started` -> run -> journal
 * `done` -> result. An id already done answers with the recorded result and does not run; an
 * id running in this process is acked again and answers when done.
 */

export interface AgentOptions {
  runtime: HostRuntime;
  journal: Journal;
  labels: Record<string, string>;
  /** Caps the memory hello reports (--capacity-memory). */
  capacityMemory?: number;
  log: Log;
  /** Scratch space (deploy sources), under the state dir. */
  tmpDir: string;
  /** The listener for direct version transfers (--transfer-listen), announced in hello. */
  transfer?: TransferListener | undefined;
}

interface Running {
  kind: CommandKind;
  abort: AbortController;
  /** Data streams the command uses: they die with the connection, and so does the command. */
  streams: string[];
  done: Promise<void>;
}

/** setTimeout's largest delay. */
const MAX_TIMER_MS = 2 ** 31 - 1;

const INTERRUPTED_BY_RESTART: Outcome = {
  ok: false,
  error: {
    code: "interrupted",
    message: "denvd restarted during the command; send it again under a new id to retry",
  },
};

function streamIds(kind: CommandKind, payload: Record<string, unknown>): string[] {
  const key = kind === "env.deploy" ? "source_stream" : "stream";
  const id = payload[key];
  return typeof id === "string" ? [id] : [];
}

export class Agent {
  readonly streams: StreamRegistry;
  private running = new Map<string, Running>();
  private accepting = true;
  private transport: SendFrame = () => false;
  private results = new RecentResults();

  constructor(private readonly o: AgentOptions) {
    this.streams = new StreamRegistry((f, sent) => this.transport(f, sent));
  }

  /** A socket opened: hello goes first, then results that waited for a connection. */
  async connected(send: SendFrame): Promise<void> {
    let hello: Frame;
    try {
      hello = await buildHello(this.o);
    } catch (err) {
      this.o.log("hello failed", { error: errorText(err) });
      return;
    }
    if (!send(hello)) return;
    this.transport = send;
    this.o.log("hello sent", {
      environments: hello.environments.length,
      versions: hello.versions.length,
      unfinished: hello.unfinished.length,
    });
    for (const frame of this.results.unsent()) {
      if (!send(frame)) return;
      this.results.markSent(frame.id);
    }
  }

  /**
   * The socket closed: streams die with it, and the commands still using one (a deploy whose
   * source has arrived goes on; its result waits for the next connection).
   */
  disconnected(reason: string): void {
    this.transport = () => false;
    for (const r of this.running.values()) {
      if (r.streams.some((s) => this.streams.has(s))) r.abort.abort("interrupted");
    }
    this.streams.failAll(`connection lost (${reason})`);
  }

  handle(frame: RawFrame): void {
    switch (frame.type) {
      case "command":
        void this.onCommand(frame);
        return;
      case "cancel": {
        const r = this.running.get(frame.id);
        this.o.log("cancel", { id: frame.id, running: r !== undefined });
        r?.abort.abort("cancelled");
        return;
      }
      case "data":
      case "window":
      case "end":
        this.streams.route(frame);
        return;
      default:
        this.o.log("frame dropped", { type: frame.type, reason: "not a frame the control plane sends" });
    }
  }

  /** Stops taking commands and waits (at most graceMs) for the running ones to finish. */
  async drain(graceMs: number): Promise<number> {
    this.accepting = false;
    const all = Promise.allSettled([...this.running.values()].map((r) => r.done));
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<void>((r) => {
      timer = setTimeout(r, graceMs);
    });
    await Promise.race([all, timeout]);
    clearTimeout(timer);
    return this.running.size;
  }

  private send(frame: RawFrame): boolean {
    return this.transport(frame);
  }

  private async onCommand(frame: CommandFrame): Promise<void> {
    const { id, kind } = frame;
    if (!this.accepting) {
      // Not journalled: the control plane sends it again to whichever denvd comes next.
      this.o.log("command ignored", { id, kind, reason: "shutting down" });
      return;
    }
    if (this.running.has(id)) {
      this.send({ v: PROTOCOL_VERSION, type: "ack", id });
      return;
    }
    let finish!: () => void;
    const running: Running = {
      kind,
      abort: new AbortController(),
      streams: streamIds(kind, frame.payload),
      done: new Promise((r) => {
        finish = r;
      }),
    };
    // Registered before the first await: a duplicate arriving meanwhile is only acked.
    this.running.set(id, running);
    try {
      await this.process(frame, running);
    } catch (err) {
      // The journal could not be written: say so, and let the control plane retry the id.
      this.o.log("command failed", { id, kind, error: errorText(err) });
      this.sendResult(id, { ok: false, error: { code: "internal", message: errorText(err) } });
    } finally {
      this.running.delete(id);
      for (const s of running.streams) this.streams.close(s);
      finish();
    }
  }

  private async process(frame: CommandFrame, running: Running): Promise<void> {
    const { id, kind } = frame;
    const journal = this.o.journal;
    const recent = this.results.get(id);
    if (recent) {
      this.o.log("command answered from memory", { id, kind });
      this.results.put(recent, this.send(recent));
      return;
    }
    // A command that changes nothing is not journalled: run again, it does no harm, and the
    // control plane never sends it again over another connection (it is not durable there).
    const journalled = !UNJOURNALLED.has(kind);
    const prior = journalled ? await journal.get(id) : undefined;
    if (prior?.state === "done" && prior.outcome) {
      this.o.log("command answered from the journal", { id, kind });
      this.sendResult(id, prior.outcome);
      return;
    }
    if (prior?.state === "started") {
      // Started by an earlier denvd and not reconciled (reconcile runs before the socket opens,
      // so only a journal copied in from elsewhere gets here): never run a command twice.
      await journal.done(prior, INTERRUPTED_BY_RESTART);
      this.sendResult(id, INTERRUPTED_BY_RESTART);
      return;
    }
    const cmd: Processing = {
      id,
      kind,
      journalled: prior ?? (journalled ? await journal.received(frame) : undefined),
    };
    this.send({ v: PROTOCOL_VERSION, type: "ack", id });
    this.o.log("command received", { id, kind });

    const parsed = CommandPayloads[kind].safeParse(frame.payload);
    if (!parsed.success) {
      const message = `invalid ${kind} payload: ${parsed.error.issues
        .map((i) => `${i.path.join(".") || "(payload)"}: ${i.message}`)
        .join("; ")}`;
      return this.finish(cmd, { ok: false, error: { code: "invalid_request", message } });
    }
    const left = frame.deadline - Date.now();
    if (left <= 0) {
      return this.finish(cmd, {
        ok: false,
        error: { code: "timeout", message: `the command's deadline passed before it started` },
      });
    }
    const deadline = setTimeout(() => running.abort.abort("timeout"), Math.min(left, MAX_TIMER_MS));
    const t0 = Date.now();
    try {
      if (running.abort.signal.aborted) {
        // Cancelled while it was being journalled: it never starts.
        const code = abortCode(running.abort.signal);
        return await this.finish(cmd, {
          ok: false,
          error: { code, message: new CommandAborted(code).message },
        });
      }
      if (cmd.journalled) cmd.journalled = await journal.started(cmd.journalled);
      const outcome = await this.execute(id, kind, parsed.data, running.abort.signal);
      await this.finish(cmd, outcome, Date.now() - t0);
    } finally {
      clearTimeout(deadline);
    }
  }

  private async execute(
    id: string,
    kind: CommandKind,
    payload: unknown,
    signal: AbortSignal,
  ): Promise<Outcome> {
    const ctx: CommandContext = {
      id,
      runtime: this.o.runtime,
      streams: this.streams,
      signal,
      tmpDir: this.o.tmpDir,
      transfer: this.o.transfer,
      log: this.o.log,
      line: (text) => void this.send({ v: PROTOCOL_VERSION, type: "progress", id, line: text }),
      phases: (interruptible) => phaseFrames(id, (f) => void this.send(f), signal, interruptible),
    };
    // Loaded at the first command: an idle denvd holds neither the handlers (and the runtime's
    // verbs behind them) nor the result schemas.
    const { handlerFor, INTERRUPTIBLE } = await import("./handlers.js");
    try {
      const handler = handlerFor(kind) as (p: unknown, c: CommandContext) => Promise<unknown>;
      const { checkedResult } = await import("./checked-result.js");
      return checkedResult(kind, await handler(payload, ctx));
    } catch (err) {
      return { ok: false, error: errorBody(err, INTERRUPTIBLE.has(kind) ? signal : undefined) };
    }
  }

  private async finish(cmd: Processing, outcome: Outcome, ms?: number): Promise<void> {
    if (cmd.journalled) await this.o.journal.done(cmd.journalled, outcome);
    this.o.log("command done", {
      id: cmd.id,
      kind: cmd.kind,
      ok: outcome.ok,
      ...(outcome.ok ? {} : { code: outcome.error.code }),
      ms,
    });
    this.sendResult(cmd.id, outcome);
  }

  private sendResult(id: string, outcome: Outcome): void {
    const frame: ResultFrame = { v: PROTOCOL_VERSION, type: "result", id, ...outcome };
    this.results.put(frame, this.send(frame));
  }
}

function errorBody(err: unknown, signal: AbortSignal | undefined): z.infer<typeof ErrorBody> {
  if (err instanceof CommandAborted) return { code: err.code, message: err.message };
  if (signal?.aborted) {
    const code: AbortCode = abortCode(signal);
    return { code, message: new CommandAborted(code).message };
  }
  if (isDenvError(err)) {
    return {
      code: err.code,
      message: err.message,
      ...(err.details.length ? { details: [...err.details] } : {}),
    };
  }
  return { code: "internal", message: errorText(err) };
}
