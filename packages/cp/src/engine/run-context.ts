import {
  type CommandKind,
  type CommandPayload,
  type CommandResult,
  CommandResults,
  ControlPlaneMessages,
  DenvError,
  type Phase,
  type PhaseName,
  type ProgressFrame,
} from "@denv/spec";
import type { z } from "zod";
import { HostError, type HostHub } from "../hub/hub.js";
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
  /** How versions go from host to host (relay, direct, auto); relay when unset. */
  transferPath?: "relay" | "direct" | "auto";
  /** Called after a deployment recorded a version (the retention policy runs there). */
  afterVersion(project: string): Promise<void>;
  /** Called after a deploy succeeded, with the pool size its file asks for (x-denv.pool). */
  afterDeploy?(project: string, poolSize: number | undefined): Promise<void>;
  /** The HTTP authorization a host fetches a project's repository with (GitHub App projects). */
  gitAuthorization?(project: string): Promise<string | undefined>;
}

export interface CommandOptions {
  /** Deployment phases the host starts and ends (with their evidence) while this command runs. */
  phases: readonly PhaseName[];
  /**
   * Or: the one deployment phase this command runs inside. It starts with the command, and the
   * evidence of the host's own phases (a snapshot's freeze, thaw, record...) joins it.
   */
  within?: PhaseName;
  upload?: () => AsyncIterable<Buffer>;
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
    name: PhaseName,
    schema: S,
    fn: () => Promise<{ value: z.output<S>; evidence: Record<string, unknown> }>,
  ): Promise<z.output<S>> {
    return this.memo(`phase:${name}`, schema, () => this.phase(name, fn));
  }

  /** A phase the cp itself runs (place, switch, record...): timing plus the evidence `fn` returns. */
  async phase<T>(
    name: PhaseName,
    fn: () => Promise<{ value: T; evidence: Record<string, unknown> }>,
  ): Promise<T> {
    this.start(name);
    const { value, evidence } = await fn();
    this.finish(name, evidence);
    await this.save();
    return value;
  }

  /**
   * Sends a host command as step `step`. Its progress drives the phases: a phase starts when the
   * host says so and ends when the host says it ended, with the evidence it sends then (the only
   * way host evidence reaches a phase); log lines go to the log. Phases the host did not end (a
   * probe skipped where egress is allowed) end when the result arrives.
   */
  async command<K extends CommandKind>(
    step: string,
    hostId: string,
    kind: K,
    payload: CommandPayload<K> | ((streamId: string) => CommandPayload<K>),
    opts: CommandOptions,
  ): Promise<CommandResult<K>> {
    if (step in this.d.state.steps)
      return CommandResults[kind].parse(this.d.state.steps[step]) as CommandResult<K>;
    const covered = opts.within ? [opts.within] : opts.phases;
    if (opts.within) this.start(opts.within);
    let result: CommandResult<K>;
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
          upload: opts.upload || undefined,
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
    for (const name of covered) {
      const status = this.phaseOf(name)?.status;
      if (status === "running" || status === "pending") this.finish(name);
    }
    this.d.state.steps[step] = result;
    await this.save();
    return result;
  }

  private async failCovered(covered: readonly PhaseName[], err: unknown): Promise<void> {
    const failed =
      covered.find((n) => this.phaseOf(n)?.status === "running") ??
      covered.find((n) => this.phaseOf(n)?.status === "pending");
    if (failed) this.failPhase(failed, err instanceof Error ? err.message : String(err));
    await this.save();
  }

  log(line: string): void {
    this.append("log", { line });
  }

  phaseOf(name: PhaseName): Phase | undefined {
    return this.d.phases.find((p) => p.name === name);
  }

  start(name: PhaseName): void {
    const ph = this.phaseOf(name);
    if (!ph || ph.status === "succeeded" || ph.status === "running") return;
    ph.status = "running";
    ph.started_at = nowIso();
    delete ph.finished_at;
    delete ph.duration_ms;
    this.append("phase", { ...ph });
  }

  finish(name: PhaseName, evidence?: Record<string, unknown>): void {
    const ph = this.phaseOf(name);
    if (!ph || ph.status === "succeeded") return;
    if (ph.status !== "running") this.start(name);
    this.close(ph, "succeeded", evidence);
  }

  failPhase(name: PhaseName, message: string): void {
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
    // A frame may end one phase and start the next: the end comes first.
    if (p.ended !== undefined) this.hostPhaseEnded(p.ended, p.evidence ?? {}, opts);
    if (p.phase !== undefined) this.hostPhaseStarted(p.phase, opts);
    if (p.line !== undefined) this.log(p.line);
    void this.save();
  }

  private hostPhaseStarted(name: PhaseName, opts: CommandOptions): void {
    if (opts.within) this.log(`${opts.within}: ${name}`);
    else if (opts.phases.includes(name)) this.start(name);
    else this.log(`phase ${name}`);
  }

  private hostPhaseEnded(name: PhaseName, evidence: Record<string, unknown>, opts: CommandOptions): void {
    if (opts.within) {
      this.mergeEvidence(opts.within, evidence);
      return;
    }
    const ph = this.phaseOf(name);
    if (ph && opts.phases.includes(name)) {
      if (ph.status !== "succeeded") this.finish(name, evidence);
      else {
        // Ended again by an attempt sent after an interruption: the newer evidence wins.
        ph.evidence = { ...ph.evidence, ...evidence };
        this.append("phase", { ...ph });
      }
      return;
    }
    // A host phase that is not one of this deployment's (the runtime's own `place`): its
    // evidence joins the phase running meanwhile, under its name.
    const running = this.d.phases.find((x) => x.status === "running");
    if (running) this.mergeEvidence(running.name, { [name]: evidence });
  }

  private mergeEvidence(name: PhaseName, evidence: Record<string, unknown>): void {
    const ph = this.phaseOf(name);
    if (ph) ph.evidence = { ...ph.evidence, ...evidence };
  }

  private append(event: "phase" | "log", data: unknown): void {
    const entry = { deploymentId: this.d.id, seq: ++this.seq, ts: nowIso(), event, data };
    this.writes = this.writes.then(() => this.deps.store.appendLog(entry)).catch(this.onWriteError);
    this.deps.events.entry(entry);
  }
}
