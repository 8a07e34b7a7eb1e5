import { DenvError, type DeploymentKind, Phases } from "@denv/spec";
import { HostError, ShutdownError } from "../hub/hub.js";
import { newId, nowIso } from "../ids.js";
import { errorMessage } from "../log.js";
import type { DeploymentRecord } from "../store/records.js";
import type { DeploymentListener } from "./events.js";
import type { KindRunner } from "./kinds/common.js";
import { deploy } from "./kinds/deploy.js";
import { fork, rollback } from "./kinds/fork.js";
import { destroy, start, stop } from "./kinds/lifecycle.js";
import { snapshot } from "./kinds/snapshot.js";
import { verify } from "./kinds/verify.js";
import { type EngineDeps, RunContext } from "./run-context.js";

const KINDS: Record<DeploymentKind, KindRunner> = {
  deploy,
  fork,
  rollback,
  snapshot,
  verify,
  stop,
  start,
  destroy,
};

export interface CreateDeployment {
  kind: DeploymentKind;
  project: string;
  /** PROJECT/ENV the deployment changes. */
  environment: string;
  request: Record<string, unknown>;
  /** Phases already done when the deployment is created (a deploy's "resolve source"). */
  done?: Array<{ name: string; startedAt: string; evidence: Record<string, unknown> }>;
  id?: string;
}

/**
 * The deployment engine: deployments are rows with phases, run in the background one at a time
 * per environment. Runs resume after a cp restart; a run interrupted by shutdown is left as it
 * was in the store (still running) for the next start to resume.
 */
export class DeploymentEngine {
  private queues = new Map<string, Promise<void>>();
  private running = new Map<string, Promise<DeploymentRecord>>();
  private closing = false;

  constructor(private readonly deps: EngineDeps) {}

  async create(input: CreateDeployment): Promise<DeploymentRecord> {
    const now = nowIso();
    const d: DeploymentRecord = {
      id: input.id ?? newId("dep"),
      kind: input.kind,
      project: input.project,
      environment: input.environment,
      status: "queued",
      phases: Phases[input.kind].map((name) => {
        const done = input.done?.find((p) => p.name === name);
        return done
          ? {
              name,
              status: "succeeded" as const,
              started_at: done.startedAt,
              finished_at: now,
              duration_ms: Date.parse(now) - Date.parse(done.startedAt),
              evidence: done.evidence,
            }
          : { name, status: "pending" as const };
      }),
      state: { request: input.request, steps: {} },
      createdAt: now,
    };
    await this.deps.store.createDeployment(d);
    this.schedule(d, false);
    return d;
  }

  /** The deployment once it finished (it may be running now, or finished long ago). */
  async wait(id: string): Promise<DeploymentRecord | undefined> {
    const running = this.running.get(id);
    if (running) return running;
    return this.deps.store.getDeployment(id);
  }

  subscribe(id: string, listener: DeploymentListener): () => void {
    return this.deps.events.subscribe(id, listener);
  }

  /** Picks up deployments a previous process left queued or running. */
  async resumeAll(): Promise<number> {
    const open = await this.deps.store.listDeployments({ statuses: ["queued", "running"] });
    open.sort((a, b) => a.createdAt.localeCompare(b.createdAt));
    for (const d of open) {
      this.deps.log.info("resuming deployment", { deployment: d.id, kind: d.kind, status: d.status });
      this.schedule(d, d.status === "running");
    }
    return open.length;
  }

  /** Stops starting new runs; in-flight runs end when the hub rejects their commands. */
  async shutdown(): Promise<void> {
    this.closing = true;
    await Promise.allSettled([...this.running.values()]);
  }

  private schedule(d: DeploymentRecord, resumed: boolean): void {
    const key = d.environment;
    const previous = this.queues.get(key) ?? Promise.resolve();
    let finish!: (r: DeploymentRecord) => void;
    const done = new Promise<DeploymentRecord>((r) => {
      finish = r;
    });
    this.running.set(d.id, done);
    const next = previous.then(async () => {
      const result = this.closing ? d : await this.run(d, resumed);
      finish(result);
    });
    this.queues.set(key, next);
    void next.finally(() => {
      this.running.delete(d.id);
      if (this.queues.get(key) === next) this.queues.delete(key);
    });
  }

  private async run(d: DeploymentRecord, resumed: boolean): Promise<DeploymentRecord> {
    const runner = KINDS[d.kind];
    const lastSeq = resumed ? ((await this.deps.store.listLogs(d.id, 0)).at(-1)?.seq ?? 0) : 0;
    const ctx = new RunContext(this.deps, d, resumed, lastSeq);
    d.status = "running";
    await ctx.save();
    try {
      d.result = await runner.run(ctx);
      d.status = "succeeded";
      // A phase this run had no need of (a fork's transfer where its version was local).
      for (const p of d.phases) if (p.status === "pending") p.status = "skipped";
    } catch (err) {
      if (this.closing && err instanceof ShutdownError) return d;
      await this.fail(ctx, runner, err);
    }
    d.finishedAt = nowIso();
    // What the run kept aside (a deploy's spool) goes before the end is stored: a deployment
    // seen finished has nothing left on the cp's disk.
    await runner
      .dispose?.(ctx)
      .catch((err: unknown) => this.deps.log.warn("dispose failed", { error: errorMessage(err) }));
    await ctx.save();
    this.deps.events.done(structuredClone(d));
    this.deps.log.info("deployment finished", { deployment: d.id, kind: d.kind, status: d.status });
    return d;
  }

  private async fail(ctx: RunContext, runner: KindRunner, err: unknown): Promise<void> {
    const d = ctx.d;
    const error =
      err instanceof HostError
        ? { code: err.hostCode, message: err.message }
        : err instanceof DenvError
          ? { code: err.code, message: err.message }
          : { code: "internal", message: errorMessage(err) };
    ctx.log(`failed: ${error.message}`);
    const running = d.phases.find((p) => p.status === "running");
    if (running) ctx.failPhase(running.name, error.message);
    else if (!d.phases.some((p) => p.status === "failed")) {
      const first = d.phases.find((p) => p.status === "pending");
      if (first) ctx.failPhase(first.name, error.message);
    }
    try {
      await runner.cleanup?.(ctx);
    } catch (cleanupErr) {
      ctx.log(`clean up failed: ${errorMessage(cleanupErr)}`);
    }
    for (const p of d.phases) if (p.status === "pending") p.status = "skipped";
    d.status = "failed";
    d.error = error;
    if (!(err instanceof DenvError))
      this.deps.log.error("deployment failed unexpectedly", { deployment: d.id, error: errorMessage(err) });
  }
}
