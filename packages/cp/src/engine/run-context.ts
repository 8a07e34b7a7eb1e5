import {
  type CommandKind,
  ControlPlaneMessages,
  DenvError,
  type Phase,
  type ProgressFrame,
} from "@denv/spec";
import type { z } from "zod";
import { HostError, type HostHub } from "../hub/hub.js";
import { type CommandPayload, type HostResult, HostResults } from "../hub/results.js";
import { nowIso } from "../ids.js";
import type { Log } from "../log.js";
import type { DeploymentRecord } from "../store/records.js";
import type { Store } from "../store/store.js";
import type { DeploymentEvents } from "./events.js";
import type { Placer } from "./placement.js";

/** How often a step interrupted on its host is sent again (under a new id). */
const MAX_RETRIES = 2;

export interface EngineDeps {
  store: Store;
  hub: HostHub;
  placer: Placer;
  events: DeploymentEvents;
  log: Log;
  /** How long one host command of a deployment may take. */
  commandTimeoutMs: number;
  /** After a restart, how long the command that was in flight may take to be answered. */
  resumeTimeoutMs: number;
  /** Called after a deployment recorded a version (the retention policy runs there). */
  afterVersion(project: string): Promise<void>;
}

export interface CommandOptions {
  /** Deployment phases the host reports progress for while this command runs. */
  phases: readonly string[];
  /** Or: the one deployment phase this command runs inside (its own phases become evidence). */
  within?: string;
  upload?: () => AsyncIterable<Buffer>;
}

/** Plain object check for evidence pulled out of results. */
function asRecord(v: unknown): Record<string, unknown> | undefined {
  return v !== null && typeof v === "object" && !Array.isArray(v)
    ? (v as Record<string, unknown>)
    : undefined;
}

/**
 * One run of one deployment: phases with timing and evidence, the live log, and steps whose
 * results are kept in the deployment row. A step that finished is never redone; the host
 * command of a step has the stable id `${deployment}.${step}`, so a run resumed after a cp
 * restart re-sends it and the host's journal answers with the recorded result.
 */
export class RunContext {
  private writes: Promise<void> = Promise.resolve();
  private resumePending: boolean;

  constructor(
    readonly deps: EngineDeps,
    readonly d: DeploymentRecord,
    readonly resumed: boolean,
    private seq: number,
  ) {
    this.resumePending = resumed;
  }

  request<S extends z.ZodType>(schema: S): z.output<S> {
    return schema.parse(this.d.state.request);
  }

  /** Runs `fn` once per deployment; a resumed run gets the recorded value back. */
  async memo<S extends z.ZodType>(
    step: string,
    schema: S,
    fn: () => Promise<z.output<S>>,
  ): Promise<z.output<S>> {
    if (step in this.d.state.steps) return schema.parse(this.d.state.steps[step]);
    const value = await fn();
    this.d.state.steps[step] = value;
    await this.save();
    return value;
  }

  /** A cp phase run once: a resumed run gets the recorded value and leaves the phase as it was. */
  cpPhase<S extends z.ZodType>(
    name: string,
    schema: S,
    fn: () => Promise<{ value: z.output<S>; evidence: Record<string, unknown> }>,
  ): Promise<z.output<S>> {
    return this.memo(`phase:${name}`, schema, () => this.phase(name, fn));
  }

  /** A phase the cp itself runs (place, switch, record...): timing plus the evidence `fn` returns. */
  async phase<T>(
    name: string,
    fn: () => Promise<{ value: T; evidence: Record<string, unknown> }>,
  ): Promise<T> {
    this.start(name);
    const { value, evidence } = await fn();
    this.finish(name, evidence);
    await this.save();
    return value;
  }

  /** Sends a host command as step `step`, mapping its progress onto phases and its log lines onto the log. */
  async command<K extends CommandKind>(
    step: string,
    hostId: string,
    kind: K,
    payload: CommandPayload<K> | ((streamId: string) => CommandPayload<K>),
    opts: CommandOptions & {
      /** Evidence per phase taken from the result (default: the result's `evidence[phase]`). */
      evidence?: (result: HostResult<K>) => Record<string, Record<string, unknown>>;
    },
  ): Promise<HostResult<K>> {
    if (step in this.d.state.steps) return HostResults[kind].parse(this.d.state.steps[step]) as HostResult<K>;
    const covered = opts.within ? [opts.within] : opts.phases;
    if (opts.within) this.start(opts.within);
    let result: HostResult<K>;
    for (;;) {
      const resumed = this.resumePending;
      this.resumePending = false;
      const timeoutMs = resumed ? this.deps.resumeTimeoutMs : this.deps.commandTimeoutMs;
      if (resumed) this.log(`resumed after a control plane restart: waiting for ${hostId} to answer ${kind}`);
      const attempt = Number(this.d.state.steps[`${step}#retries`] ?? 0);
      try {
        result = await this.deps.hub.send(hostId, kind, payload, {
          id: attempt === 0 ? `${this.d.id}.${step}` : `${this.d.id}.${step}.r${attempt}`,
          timeoutMs,
          durable: true,
          onProgress: (p) => this.progress(p, opts),
          ...(opts.upload ? { upload: opts.upload } : {}),
        });
        break;
      } catch (err) {
        // denvd removes what an interrupted command created (a restart, or a stream cut by a
        // dropped connection) and answers a re-sent id with that same outcome: trying again
        // takes a new id.
        if (err instanceof HostError && err.hostCode === "interrupted" && attempt < MAX_RETRIES) {
          this.d.state.steps[`${step}#retries`] = attempt + 1;
          this.log(`${kind} was interrupted on ${hostId} (${err.message}); sending it again`);
          await this.save();
          continue;
        }
        await this.failCovered(covered, err);
        if (resumed && err instanceof DenvError && err.code === "timeout") {
          throw new DenvError(
            "timeout",
            ControlPlaneMessages.resumeTimedOut(hostId, Math.round(timeoutMs / 1000)),
          );
        }
        throw err;
      }
    }
    const evidence = opts.evidence
      ? opts.evidence(result)
      : asRecord((result as { evidence?: unknown }).evidence);
    for (const name of covered) {
      const ph = this.phaseOf(name);
      const ev = asRecord(evidence?.[name]);
      if (!ph) continue;
      if (ph.status === "running" || ph.status === "pending") this.finish(name, ev);
      else if (ev) {
        // Evidence only the result carries (digests, container ids) joins a phase already done.
        ph.evidence = { ...ph.evidence, ...ev };
        this.append("phase", { ...ph });
      }
    }
    this.d.state.steps[step] = result;
    await this.save();
    return result;
  }

  private async failCovered(covered: readonly string[], err: unknown): Promise<void> {
    const failed =
      covered.find((n) => this.phaseOf(n)?.status === "running") ??
      covered.find((n) => this.phaseOf(n)?.status === "pending");
    if (failed) this.failPhase(failed, err instanceof Error ? err.message : String(err));
    await this.save();
  }

  log(line: string): void {
    this.append("log", { line });
  }

  phaseOf(name: string): Phase | undefined {
    return this.d.phases.find((p) => p.name === name);
  }

  start(name: string): void {
    const ph = this.phaseOf(name);
    if (!ph || ph.status === "succeeded" || ph.status === "running") return;
    ph.status = "running";
    ph.started_at = nowIso();
    delete ph.finished_at;
    delete ph.duration_ms;
    this.append("phase", { ...ph });
  }

  finish(name: string, evidence?: Record<string, unknown>): void {
    const ph = this.phaseOf(name);
    if (!ph || ph.status === "succeeded") return;
    if (ph.status !== "running") this.start(name);
    this.close(ph, "succeeded", evidence);
  }

  failPhase(name: string, message: string): void {
    const ph = this.phaseOf(name);
    if (!ph || ph.status === "failed") return;
    if (ph.status !== "running") this.start(name);
    this.close(ph, "failed", { error: message });
  }

  /** Stores the row; resolves once it and every earlier phase change and log line are stored. */
  save(): Promise<void> {
    const snapshot = structuredClone(this.d);
    this.writes = this.writes.then(() => this.deps.store.updateDeployment(snapshot)).catch(this.onWriteError);
    return this.writes;
  }

  // A lost write must not stop the run (the next save writes the whole row again).
  private onWriteError = (err: unknown): void => {
    this.deps.log.error("storing deployment progress failed", {
      deployment: this.d.id,
      error: err instanceof Error ? err.message : String(err),
    });
  };

  private close(ph: Phase, status: "succeeded" | "failed", evidence?: Record<string, unknown>): void {
    ph.status = status;
    ph.finished_at = nowIso();
    ph.duration_ms = Date.parse(ph.finished_at) - Date.parse(ph.started_at ?? ph.finished_at);
    if (evidence) ph.evidence = { ...ph.evidence, ...evidence };
    this.append("phase", { ...ph });
  }

  private progress(p: ProgressFrame, opts: CommandOptions): void {
    if (p.phase !== undefined) {
      if (opts.within) {
        // A command's own phases (a snapshot's freeze, thaw...) inside one deployment phase.
        this.log(`${opts.within}: ${p.phase}`);
        if (p.evidence) this.mergeEvidence(opts.within, { [p.phase]: p.evidence });
      } else if (this.phaseOf(p.phase) && opts.phases.includes(p.phase)) {
        // A phase named is the current one: the one before it ended. Its evidence may come with
        // the start or with a second frame; a phase ends when the next starts or the result comes.
        for (const n of opts.phases)
          if (n !== p.phase && this.phaseOf(n)?.status === "running") this.finish(n);
        this.start(p.phase);
        if (p.evidence) this.mergeEvidence(p.phase, p.evidence);
      } else {
        this.log(`phase ${p.phase}`);
        const running = this.d.phases.find((ph) => ph.status === "running");
        if (running && p.evidence) this.mergeEvidence(running.name, { [p.phase]: p.evidence });
      }
    } else if (p.evidence) {
      const running = this.d.phases.find((ph) => ph.status === "running");
      if (running) this.mergeEvidence(running.name, p.evidence);
    }
    if (p.line !== undefined) this.log(p.line);
    void this.save();
  }

  private mergeEvidence(name: string, evidence: Record<string, unknown>): void {
    const ph = this.phaseOf(name);
    if (ph) ph.evidence = { ...ph.evidence, ...evidence };
  }

  private append(event: "phase" | "log", data: unknown): void {
    const entry = { deploymentId: this.d.id, seq: ++this.seq, ts: nowIso(), event, data };
    this.writes = this.writes.then(() => this.deps.store.appendLog(entry)).catch(this.onWriteError);
    this.deps.events.entry(entry);
  }
}
