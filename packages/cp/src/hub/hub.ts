import {
  type CommandFrame,
  type CommandKind,
  type CommandPayload,
  type CommandResult,
  ControlPlaneMessages,
  DenvError,
  type Frame,
  HEARTBEAT_MS,
  type HelloFrame,
  MISSED_HEARTBEATS_OFFLINE,
  PROTOCOL_VERSION,
  type ProgressFrame,
} from "@denv/spec";
import type { WebSocket } from "ws";
import { randomToken } from "../ids.js";
import { errorMessage, type Log } from "../log.js";
import { checkedAnswer } from "./answer-check.js";
import { HostError, ShutdownError } from "./host-error.js";
import { HostSession } from "./host-session.js";
import type { StreamCall } from "./stream-call.js";
import { type DirectRoute, directRoute } from "./transfer-route.js";

// The engine, the services, the routes and the target drivers take these from the hub.
export { HostError, ShutdownError } from "./host-error.js";
export { callFailure, type StreamCall } from "./stream-call.js";

/** The longest a Node timer waits (a longer delay fires at once). */
const MAX_TIMER_MS = 2 ** 31 - 1;

/** What the hub tells the rest of the cp about hosts coming and going. */
export interface HostLifecycle {
  /** A host said hello: record it online and reconcile what it holds. */
  online(hostId: string, hello: HelloFrame): Promise<void>;
  offline(hostId: string, reason: string): Promise<void>;
}

export interface HubOptions {
  lifecycle: HostLifecycle;
  log: Log;
  heartbeatMs?: number;
}

export interface SendOptions {
  /** The idempotency key; a deployment step uses a stable one so a re-send is recognised. */
  id: string;
  /** How long the command may take, from now. */
  timeoutMs: number;
  onProgress?: (p: ProgressFrame) => void;
  /**
   * true: wait for an offline host and re-send after every reconnect until a result arrives
   * (deployment steps). false: fail at once when the host is offline or drops (interactive calls).
   */
  durable: boolean;
  /** Bytes to send to the host on a stream whose id the payload names (a deploy's source). */
  upload?: () => AsyncIterable<Buffer>;
}

interface Pending {
  id: string;
  hostId: string;
  kind: CommandKind;
  makePayload: (streamId: string) => Record<string, unknown>;
  deadline: number;
  opts: SendOptions;
  attempt: number;
  session?: HostSession;
  resolve: (value: unknown) => void;
  reject: (err: Error) => void;
  timer: NodeJS.Timeout;
}

/**
 * The host hub: one session per connected host, commands with idempotency keys, deadlines and
 * re-sends, heartbeats, and the data streams of interactive commands.
 */
export class HostHub {
  /**
   * Heartbeats go out in slices of the period, one every BEAT_TICK_MS (at most 100 slices), a
   * host's slice fixed by its id: each send is a syscall and a slice's run back to back on the
   * event loop, so 10,000 hosts cost 100 small sends every 50 ms rather than 500 every 250 ms (a
   * stall requests would queue behind).
   */
  private static readonly BEAT_TICK_MS = 5;
  private static readonly MAX_BEAT_SLICES = 100;
  private readonly beatSlices: number;
  private sessions = new Map<string, HostSession>();
  /** Each session's direct transfer listener, as checked at its hello. */
  private routes = new WeakMap<HostSession, DirectRoute | undefined>();
  /** The connected hosts by heartbeat slice: a tick visits its own slice, not every session. */
  private readonly slices: Array<Set<string>>;
  /** Per host, the lifecycle call (online, offline) running now: the next one waits for it. */
  private lifecycleCalls = new Map<string, Promise<void>>();
  private pending = new Map<string, { p: Pending; promise: Promise<unknown> }>();
  private heartbeatTimer: NodeJS.Timeout;
  private beatTick = 0;
  /** When the last tick ran, and until when nobody is cut for silence (after the cp stalled). */
  private lastTick = Date.now();
  private graceUntil = 0;
  private closing = false;
  private readonly heartbeatMs: number;

  constructor(private readonly options: HubOptions) {
    this.heartbeatMs = options.heartbeatMs ?? HEARTBEAT_MS;
    this.beatSlices = Math.max(
      1,
      Math.min(HostHub.MAX_BEAT_SLICES, Math.floor(this.heartbeatMs / HostHub.BEAT_TICK_MS)),
    );
    this.slices = Array.from({ length: this.beatSlices }, () => new Set<string>());
    const tick = Math.max(1, Math.floor(this.heartbeatMs / this.beatSlices));
    this.heartbeatTimer = setInterval(() => this.beat(), tick);
    this.heartbeatTimer.unref();
  }

  /**
   * Takes an authenticated host socket; the session starts with the host's hello. `peer`: the
   * address the connection comes from (a direct transfer listener must be there).
   */
  accept(socket: WebSocket, hostId: string, peer?: string): void {
    if (this.closing) {
      socket.close(1001, "the control plane is shutting down");
      return;
    }
    new HostSession(hostId, socket, {
      hello: (s, hello) => {
        const route = directRoute(hostId, hello.transfer_listen, peer);
        this.routes.set(s, route);
        if (route && "refused" in route)
          this.options.log.warn("direct transfers refused", { host: hostId, why: route.refused });
        return this.onHello(s, hello);
      },
      frame: (s, frame) => this.onFrame(s, frame),
      closed: (s, reason) => this.onClosed(s, reason),
    });
  }

  /** Where a host takes direct transfers, as its current connection's hello said and was checked. */
  directRoute(hostId: string): DirectRoute | undefined {
    const s = this.sessions.get(hostId);
    return s ? this.routes.get(s) : undefined;
  }

  isOnline(hostId: string): boolean {
    return this.sessions.get(hostId)?.isOpen ?? false;
  }

  /** Closes a host's stream now (its credential was revoked); a no-op when it is not connected. */
  disconnect(hostId: string, reason: string): void {
    this.sessions.get(hostId)?.close(reason);
  }

  onlineCount(): number {
    return this.sessions.size;
  }

  /** Sends a command and resolves with its validated result (or rejects with the host's DenvError). */
  send<K extends CommandKind>(
    hostId: string,
    kind: K,
    payload: CommandPayload<K> | ((streamId: string) => CommandPayload<K>),
    opts: SendOptions,
  ): Promise<CommandResult<K>> {
    const existing = this.pending.get(opts.id);
    if (existing) return existing.promise as Promise<CommandResult<K>>;
    if (this.closing) return Promise.reject(new ShutdownError());
    if (!opts.durable && !this.isOnline(hostId)) {
      return Promise.reject(new DenvError("conflict", ControlPlaneMessages.hostOffline(hostId)));
    }
    const makePayload = typeof payload === "function" ? payload : () => payload;
    // Whole milliseconds (a frame's deadline is an integer: an exec timeout of 1.2345 s made one
    // that denvd dropped as malformed, and the exec waited for nothing), within what a timer can wait.
    const timeoutMs = Math.min(Math.ceil(opts.timeoutMs), MAX_TIMER_MS);
    let p!: Pending;
    const promise = new Promise<unknown>((resolve, reject) => {
      p = {
        id: opts.id,
        hostId,
        kind,
        makePayload: makePayload as (streamId: string) => Record<string, unknown>,
        deadline: Date.now() + timeoutMs,
        opts,
        attempt: 0,
        resolve,
        reject,
        timer: setTimeout(() => this.expire(opts.id), timeoutMs),
      };
    });
    this.pending.set(opts.id, { p, promise });
    const session = this.sessions.get(hostId);
    if (session) this.transmit(p, session);
    return promise as Promise<CommandResult<K>>;
  }

  /**
   * Starts an interactive command with a data stream on the host's current connection: bytes
   * flow both ways under credit, and the call fails if the host drops. `bulk`: a version
   * transfer's stream (a larger window, larger frames).
   */
  stream<K extends CommandKind>(
    hostId: string,
    kind: K,
    makePayload: (streamId: string) => CommandPayload<K>,
    opts: { id: string; timeoutMs: number; bulk?: boolean },
  ): StreamCall<K> {
    const session = this.sessions.get(hostId);
    if (!session) throw new DenvError("conflict", ControlPlaneMessages.hostOffline(hostId));
    const streamId = `${opts.id}.s`;
    const { bulk, ...sendOpts } = opts;
    const inbound = session.streams.openInbound(streamId, { bulk });
    const outbound = session.streams.openOutbound(streamId, { bulk });
    const result = this.send(hostId, kind, () => makePayload(streamId), { ...sendOpts, durable: false });
    // The host has nothing more to read once it answered; the inbound side drains on its own.
    void result.then(
      () => outbound.drop(new Error("the command finished")),
      (err: unknown) => {
        outbound.drop(err instanceof Error ? err : new Error(String(err)));
        if (!inbound.readableEnded) inbound.fail(errorMessage(err));
      },
    );
    return {
      commandId: opts.id,
      streamId,
      inbound,
      outbound,
      result,
      close: () => session.streams.close(streamId),
    };
  }

  /** Asks the host to stop a command (its process tree is killed); its result still arrives. */
  cancel(commandId: string): void {
    const entry = this.pending.get(commandId);
    entry?.p.session?.send({ v: PROTOCOL_VERSION, type: "cancel", id: commandId });
  }

  async close(): Promise<void> {
    this.closing = true;
    clearInterval(this.heartbeatTimer);
    for (const { p } of this.pending.values()) {
      clearTimeout(p.timer);
      p.reject(new ShutdownError());
    }
    this.pending.clear();
    for (const s of this.sessions.values()) s.close("the control plane is shutting down");
    this.sessions.clear();
    for (const slice of this.slices) slice.clear();
  }

  // ---- internals

  private transmit(p: Pending, session: HostSession): void {
    p.attempt++;
    p.session = session;
    // A fresh stream id per attempt (and per cp process): bytes of an attempt that broke off
    // never mix with the next.
    const streamId = `${p.id}.s${p.attempt}-${randomToken(3)}`;
    const frame: CommandFrame = {
      v: PROTOCOL_VERSION,
      type: "command",
      id: p.id,
      kind: p.kind,
      payload: p.makePayload(streamId),
      deadline: p.deadline,
    };
    const upload = p.opts.upload;
    const outbound = upload ? session.streams.openOutbound(streamId) : undefined;
    session.send(frame);
    if (upload && outbound) {
      outbound.pump(upload(), "file").catch((err: unknown) => {
        this.options.log.warn("upload stream broke off", { command: p.id, error: errorMessage(err) });
      });
    }
  }

  private async onHello(session: HostSession, hello: HelloFrame): Promise<void> {
    const previous = this.sessions.get(session.hostId);
    this.sessions.set(session.hostId, session);
    this.slices[beatSlice(session.hostId, this.beatSlices)]?.add(session.hostId);
    previous?.close("replaced by a newer connection of the same host");
    await this.inTurn(session.hostId, () => this.options.lifecycle.online(session.hostId, hello));
    if (!session.isOpen) return;
    // Everything still waiting for this host goes (again): the host's journal answers a known
    // id with its recorded result, or keeps running it, and never runs it twice.
    for (const { p } of this.pending.values()) {
      if (p.hostId === session.hostId && p.opts.durable) this.transmit(p, session);
    }
  }

  private onFrame(session: HostSession, frame: Exclude<Frame, { type: "hello" }>): void {
    if (frame.type === "progress") {
      const entry = this.pending.get(frame.id);
      if (entry?.p.hostId === session.hostId) entry.p.opts.onProgress?.(frame);
    } else if (frame.type === "result") {
      const entry = this.pending.get(frame.id);
      // Duplicates (a result for a command already settled, e.g. answered twice after a
      // re-send) and results of other hosts' commands are ignored.
      if (!entry || entry.p.hostId !== session.hostId) return;
      this.settle(entry.p, frame.ok, frame.result, frame.error);
    }
    // ack and heartbeat only prove liveness, which receiving any frame records.
  }

  private settle(
    p: Pending,
    ok: boolean,
    result: unknown,
    error: { code: string; message: string; details?: string[] | undefined } | undefined,
  ): void {
    this.pending.delete(p.id);
    clearTimeout(p.timer);
    if (!ok) {
      p.reject(
        new HostError(
          error?.code ?? "internal",
          error?.message ?? `${p.kind} failed on host ${p.hostId}`,
          error?.details,
        ),
      );
      return;
    }
    const checked = checkedAnswer(p.hostId, p.kind, p.makePayload(""), result);
    if (checked.error) {
      if (checked.wrong) {
        this.options.log.warn("host answered for something it was not asked about", {
          host: p.hostId,
          command: p.id,
          kind: p.kind,
          why: checked.wrong,
        });
      }
      p.reject(checked.error);
      return;
    }
    p.resolve(checked.value);
  }

  private expire(id: string): void {
    const entry = this.pending.get(id);
    if (!entry) return;
    const { p } = entry;
    this.pending.delete(id);
    p.session?.send({ v: PROTOCOL_VERSION, type: "cancel", id });
    p.reject(
      new DenvError(
        "timeout",
        `${p.kind} on host ${p.hostId} got no result within ${Math.round(p.opts.timeoutMs / 1000)}s`,
      ),
    );
  }

  private onClosed(session: HostSession, reason: string): void {
    // Interactive calls die with their connection (their streams did), even when a newer
    // connection of the same host already replaced it.
    for (const { p } of [...this.pending.values()]) {
      if (p.session === session && !p.opts.durable) {
        this.pending.delete(p.id);
        clearTimeout(p.timer);
        p.reject(new DenvError("internal", `host ${p.hostId} disconnected during ${p.kind}: ${reason}`));
      }
    }
    if (this.sessions.get(session.hostId) !== session) return;
    this.sessions.delete(session.hostId);
    this.slices[beatSlice(session.hostId, this.beatSlices)]?.delete(session.hostId);
    if (this.closing) return;
    this.inTurn(session.hostId, () => this.options.lifecycle.offline(session.hostId, reason)).catch(
      (err: unknown) => {
        this.options.log.error("marking a host offline failed", {
          host: session.hostId,
          error: errorMessage(err),
        });
      },
    );
  }

  /**
   * Runs a host's lifecycle calls one after the other, in the order the hub saw its connections
   * come and go: both read the host's row and write it back, so the offline of a connection that
   * dropped, still writing when the host's next connection says hello, would otherwise land last
   * and leave a connected host offline.
   */
  private inTurn(hostId: string, call: () => Promise<void>): Promise<void> {
    const next = (this.lifecycleCalls.get(hostId) ?? Promise.resolve()).then(call, call);
    this.lifecycleCalls.set(hostId, next);
    const forget = () => {
      if (this.lifecycleCalls.get(hostId) === next) this.lifecycleCalls.delete(hostId);
    };
    next.then(forget, forget);
    return next;
  }

  /** One slice of the heartbeat period: the hosts whose id falls in it. */
  private beat(): void {
    const now = Date.now();
    // A tick a whole period late: the control plane itself stalled, and what hosts sent meanwhile
    // is still unread in their sockets. Nobody is cut for silence until a period after.
    if (now - this.lastTick > this.heartbeatMs) this.graceUntil = now + this.heartbeatMs;
    this.lastTick = now;
    const slice = this.slices[this.beatTick++ % this.beatSlices] ?? new Set<string>();
    for (const id of [...slice]) {
      const s = this.sessions.get(id);
      if (!s) continue;
      if (now > this.graceUntil && now - s.lastSeen > this.heartbeatMs * MISSED_HEARTBEATS_OFFLINE) {
        s.terminate(`missed ${MISSED_HEARTBEATS_OFFLINE} heartbeats`);
      } else {
        s.send({ v: PROTOCOL_VERSION, type: "heartbeat", ts: now });
      }
    }
  }
}

/** A host's heartbeat slice: a stable hash of its id. */
export function beatSlice(hostId: string, slices: number): number {
  let h = 0;
  for (let i = 0; i < hostId.length; i++) h = (h * 31 + hostId.charCodeAt(i)) >>> 0;
  return h % slices;
}
