import type { CommandKind, CommandPayloads, CommandResults } from "@denv/spec";
import type { z } from "zod";
import type { HostRuntime } from "../runtime/host-runtime.js";
import type { PhaseListener } from "../runtime/phase-listener.js";
import type { TransferListener } from "../transfer/direct.js";
import type { Log } from "./log.js";
import type { StreamRegistry } from "./streams.js";

/** What a command handler gets: its payload (validated), the runtime, its streams, and a signal. */
export interface CommandContext {
  /** The command id: passed to runtime ops as `command`, so what they create carries it as a label. */
  id: string;
  runtime: HostRuntime;
  streams: StreamRegistry;
  /** Aborted by a `cancel` frame, the deadline, or (for stream commands) a lost connection. */
  signal: AbortSignal;
  /** Scratch space under the state dir (deploy sources). */
  tmpDir: string;
  /** This host's listener for direct version transfers (--transfer-listen), if it has one. */
  transfer?: TransferListener | undefined;
  log: Log;
  /** Sends a log line (a progress frame). */
  line(text: string): void;
  /**
   * A phase listener that reports on progress frames (phase-frames.ts). `interruptible`: a phase
   * that starts once the signal is aborted throws, which stops the op there; only for ops whose
   * every phase runs inside their rollback scope (deploy, fork), so what they created is removed.
   */
  phases(interruptible: boolean): PhaseListener;
}

export type Payload<K extends CommandKind> = z.output<(typeof CommandPayloads)[K]>;
/** What a handler of kind K returns: spec's result schema of K, before its defaults. */
export type HandlerResult<K extends CommandKind> = z.input<(typeof CommandResults)[K]>;
export type Handler<K extends CommandKind> = (
  payload: Payload<K>,
  ctx: CommandContext,
) => Promise<HandlerResult<K>>;

/** Why a command's signal was aborted; becomes the result's error code. */
export type AbortCode = "cancelled" | "timeout" | "interrupted";

const ABORT_MESSAGES: Record<AbortCode, string> = {
  cancelled: "the command was cancelled by the control plane",
  timeout: "the command's deadline passed before it finished",
  interrupted: "the connection to the control plane dropped while the command was streaming",
};

/** Thrown by handlers when their signal stopped them; the reason decides the error code. */
export class CommandAborted extends Error {
  override name = "CommandAborted";
  constructor(readonly code: AbortCode) {
    super(ABORT_MESSAGES[code]);
  }
}

export function abortCode(signal: AbortSignal): AbortCode {
  const reason: unknown = signal.reason;
  return reason === "timeout" || reason === "interrupted" ? reason : "cancelled";
}

export function throwIfAborted(signal: AbortSignal): void {
  if (signal.aborted) throw new CommandAborted(abortCode(signal));
}

/** Waits for `work` unless the signal stops the wait first (the work itself goes on). */
export function unlessAborted<T>(work: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(new CommandAborted(abortCode(signal)));
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(new CommandAborted(abortCode(signal)));
    signal.addEventListener("abort", onAbort, { once: true });
    work.then(
      (v) => {
        signal.removeEventListener("abort", onAbort);
        resolve(v);
      },
      (err: unknown) => {
        signal.removeEventListener("abort", onAbort);
        reject(err);
      },
    );
  });
}
