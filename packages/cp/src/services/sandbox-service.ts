import {
  type CreateSandbox,
  checkName,
  DenvError,
  type Environment,
  type ErrorCode,
  ErrorCodes,
  PlacementEvidence,
  type SandboxBatch,
  type SandboxDestroy,
  SandboxMessages,
} from "@denv/spec";
import type { z } from "zod";
import type { HostHub } from "../hub/hub.js";
import { nowIso, randomToken } from "../ids.js";
import { errorMessage, type Log } from "../log.js";
import type { DeploymentRecord, EnvironmentRecord } from "../store/records.js";
import type { Store } from "../store/store.js";
import { assertScope, canSee, NotFound, type Principal } from "./access.js";
import type { DeploymentService } from "./deployment-service.js";
import type { EnvironmentService } from "./environment-service.js";
import type { PoolService } from "./pool-service.js";
import { presentEnvironment } from "./present.js";

/** A failed deployment's error, raised to the caller that waited for it. */
function raise(d: DeploymentRecord): never {
  throw failure(d);
}

function failure(d: DeploymentRecord): DenvError {
  const code = d.error?.code ?? "internal";
  return new DenvError(
    code in ErrorCodes ? (code as ErrorCode) : "internal",
    d.error?.message ?? `deployment ${d.id} failed`,
  );
}

/** How many forks of one POST /v1/sandboxes run at once (placement itself goes one at a time). */
const BATCH_CONCURRENCY = 8;

type Outcome =
  | { ok: true; env: Environment; placement: PlacementEvidence }
  | { ok: false; sandbox: string; error: DenvError };

/**
 * Sandboxes: environments for one episode. Creating one forks a version and waits until it is
 * ready (or claims a warm fork of the pool). Destroying one answers once it is unreachable
 * (sealed, marked `destroying`) and finishes on its host in the background; the sweeper
 * destroys those whose TTL ended, and starts again the destroys that did not finish (a host
 * that was offline, a failed attempt, a cp restart between the mark and the deployment).
 */
export class SandboxService {
  /** The destroy deployment of each sandbox being destroyed, until it settles. */
  private destroying = new Map<string, Promise<DeploymentRecord>>();

  constructor(
    private readonly store: Store,
    private readonly deployments: DeploymentService,
    private readonly environments: Pick<EnvironmentService, "seal" | "unseal">,
    private readonly hub: Pick<HostHub, "isOnline">,
    private readonly log: Log,
    private readonly pools?: PoolService,
  ) {}

  private readonly online = (hostId: string) => this.hub.isOnline(hostId);

  async create(p: Principal, req: z.output<typeof CreateSandbox>): Promise<Environment> {
    const r = await this.createOne(p, req, req.name, new Date(Date.now() + req.ttl_sec * 1000).toISOString());
    if (!r.ok) throw r.error;
    return r.env;
  }

  /**
   * `count` sandboxes of one version, placed one at a time (each on a host holding the version
   * while one has room, else where it is sent), forked up to BATCH_CONCURRENCY at once. All or none: when one fails, no more
   * start, and every one this call created is destroyed before the error names the one that
   * failed (a destroy that fails too is named in it).
   */
  async createMany(
    p: Principal,
    req: z.output<typeof CreateSandbox> & { count: number },
  ): Promise<z.output<typeof SandboxBatch>> {
    const expiresAt = new Date(Date.now() + req.ttl_sec * 1000).toISOString();
    const outcomes: Outcome[] = [];
    let next = 0;
    let failed = false;
    const worker = async () => {
      while (!failed && next < req.count) {
        const i = next++;
        const r = await this.createOne(p, req, req.name && `${req.name}-${i + 1}`, expiresAt);
        outcomes[i] = r;
        if (!r.ok) failed = true;
      }
    };
    await Promise.all(Array.from({ length: Math.min(BATCH_CONCURRENCY, req.count) }, worker));
    const firstFailed = outcomes.findIndex((o) => o && !o.ok);
    const created = outcomes.filter((o): o is Extract<Outcome, { ok: true }> => o?.ok === true);
    if (firstFailed < 0) return { sandboxes: created.map((o) => ({ ...o.env, placement: o.placement })) };
    const f = outcomes[firstFailed] as Extract<Outcome, { ok: false }>;
    const undo = await Promise.all(
      created.map(async ({ env }) => {
        try {
          const rec = await this.store.getEnvironment(env.id);
          if (!rec) return undefined;
          const d = await this.destroy(p, rec);
          const done = await this.deployments.wait(d.id);
          if (done.status !== "succeeded") throw failure(done);
          return undefined;
        } catch (err) {
          return SandboxMessages.cleanupFailed(env.id, (err as Error).message);
        }
      }),
    );
    const undone = undo.filter((u): u is string => u !== undefined);
    const message = [
      SandboxMessages.batchFailed(
        firstFailed + 1,
        req.count,
        f.sandbox,
        f.error.message,
        created.length - undone.length,
      ),
      ...undone,
    ].join("; ");
    throw new DenvError(f.error.code, message);
  }

  /** One sandbox, ready; a failure is a value (the batch cleans up before it raises). */
  private async createOne(
    p: Principal,
    req: z.output<typeof CreateSandbox>,
    name: string | undefined,
    expiresAt: string,
  ): Promise<Outcome> {
    const alpha = await this.store.getEnvironment(`${req.project}/alpha`);
    const sourceEnv = req.version === undefined && alpha?.version ? "alpha" : undefined;
    let missed = false;
    if (this.pools) {
      try {
        const version = await this.deployments.resolveVersion(p, req.project, sourceEnv, req.version);
        const sandboxName = checkName("environment", name ?? `sbx-${randomToken(4).slice(0, 6)}`);
        if (!(await this.store.getEnvironment(`${req.project}/${sandboxName}`))) {
          const hit = await this.pools.claim(req.project, version, sandboxName, expiresAt);
          if (hit)
            return { ok: true, env: presentEnvironment(hit.env, this.online), placement: hit.placement };
          missed = true;
          name = sandboxName;
        }
      } catch (err) {
        if (!(err instanceof DenvError)) throw err;
        return { ok: false, sandbox: name ? `${req.project}/${name}` : req.project, error: err };
      }
    }
    try {
      return await this.coldFork(p, req, sourceEnv, name, expiresAt);
    } finally {
      if (missed) this.pools?.coldForkDone(req.project);
    }
  }

  private async coldFork(
    p: Principal,
    req: z.output<typeof CreateSandbox>,
    sourceEnv: string | undefined,
    name: string | undefined,
    expiresAt: string,
  ): Promise<Outcome> {
    let d: DeploymentRecord;
    try {
      d = await this.deployments.startFork(p, req.project, sourceEnv, req.version, name, {
        expires_at: expiresAt,
      });
    } catch (err) {
      if (!(err instanceof DenvError)) throw err;
      return { ok: false, sandbox: name ? `${req.project}/${name}` : req.project, error: err };
    }
    const done = await this.deployments.wait(d.id);
    if (done.status !== "succeeded") return { ok: false, sandbox: d.environment, error: failure(done) };
    const env = await this.store.getEnvironment(d.environment);
    if (!env) throw NotFound.sandbox(d.environment);
    const placement = PlacementEvidence.parse(done.phases.find((ph) => ph.name === "place")?.evidence);
    return { ok: true, env: presentEnvironment(env, this.online), placement };
  }

  async list(p: Principal): Promise<Environment[]> {
    const all = await this.store.listEnvironments({ sandbox: true });
    return all.filter((e) => canSee(p, e.project)).map((e) => presentEnvironment(e, this.online));
  }

  /**
   * Destroys a sandbox. Answers once it is unreachable: sealed (no new exec, files or tunnel; those
   * in flight cancelled) and marked `destroying` in the store, its destroy deployment started.
   * The host's removal finishes in the background and the room it holds is released only then.
   * `wait`: answers once it is gone (or raises the destroy's failure).
   */
  async delete(
    p: Principal,
    project: string,
    env: string,
    opts: { wait?: boolean } = {},
  ): Promise<z.output<typeof SandboxDestroy>> {
    const id = `${project}/${env}`;
    assertScope(p, project, () => NotFound.sandbox(id));
    const e = await this.store.getEnvironment(id);
    if (!e?.sandbox) throw NotFound.sandbox(id);
    const d = await this.destroy(p, e);
    if (!opts.wait) return { id, status: "destroying", deployment: d.id };
    const done = await this.deployments.wait(d.id);
    if (done.status !== "succeeded") raise(done);
    return { id, status: "destroyed", deployment: d.id };
  }

  /**
   * Seals the sandbox, marks it `destroying` (in this order: a call that read the record before
   * the mark still meets the seal) and starts its destroy deployment; a sandbox already being
   * destroyed gets the same deployment back. The mark comes before the deployment, so a crash
   * in between leaves a `destroying` sandbox that the next sweep destroys.
   */
  private destroy(p: Principal, e: EnvironmentRecord): Promise<DeploymentRecord> {
    const running = this.destroying.get(e.id);
    if (running) return running;
    const started = (async () => {
      this.environments.seal(e.id);
      if (e.status !== "destroying")
        await this.store.putEnvironment({ ...e, status: "destroying", updatedAt: nowIso() });
      return this.deployments.change(p, e.project, e.name, "destroy");
    })();
    this.destroying.set(e.id, started);
    started.then(
      (d) => this.settled(e.id, d.id),
      () => this.destroying.delete(e.id),
    );
    return started;
  }

  /** Follows a destroy deployment until it ends: gone -> unsealed; failed -> the sweep retries. */
  private settled(envId: string, deployment: string): void {
    this.deployments
      .wait(deployment)
      .then(async (d) => {
        if (d.status === "succeeded") this.environments.unseal(envId);
        else
          this.log.warn("destroying a sandbox failed; the sweep retries", {
            sandbox: envId,
            error: d.error?.message,
          });
      })
      .catch((err: unknown) =>
        this.log.warn("following a sandbox destroy failed", { sandbox: envId, error: errorMessage(err) }),
      )
      .finally(() => this.destroying.delete(envId));
  }

  /**
   * After a start: the destroy deployments the engine resumed are followed (not started twice),
   * and the sweep runs at once for the rest.
   */
  async resume(system: Principal): Promise<number> {
    const open = await this.store.listDeployments({ statuses: ["queued", "running"] });
    for (const d of open) {
      if (d.kind !== "destroy" || this.destroying.has(d.environment)) continue;
      this.environments.seal(d.environment);
      this.destroying.set(d.environment, Promise.resolve(d));
      this.settled(d.environment, d.id);
    }
    return this.sweep(system);
  }

  /**
   * Destroys every sandbox past its TTL, and every `destroying` one whose destroy is not under
   * way (its host online, or on none): one destroy deployment each, never two at once.
   */
  async sweep(system: Principal): Promise<number> {
    const now = new Date().toISOString();
    const all = await this.store.listEnvironments({ sandbox: true });
    let started = 0;
    for (const e of all) {
      if (this.destroying.has(e.id)) continue;
      const expired = e.expiresAt !== undefined && e.expiresAt < now;
      const stuck = e.status === "destroying" && (!e.hostId || this.hub.isOnline(e.hostId));
      if (!expired && !stuck) continue;
      started++;
      this.destroy(system, e)
        .then((d) => this.deployments.wait(d.id))
        .then((d) =>
          this.log.info(expired ? "sandbox expired and destroyed" : "sandbox destroy finished", {
            sandbox: e.id,
            status: d.status,
          }),
        )
        .catch((err: unknown) =>
          this.log.warn("sweeping a sandbox failed", { sandbox: e.id, error: errorMessage(err) }),
        );
    }
    return started;
  }
}
