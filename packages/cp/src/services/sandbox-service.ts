import {
  type CreateSandbox,
  checkName,
  DenvError,
  type Environment,
  type ErrorCode,
  ErrorCodes,
  PlacementEvidence,
  type SandboxBatch,
  SandboxMessages,
} from "@denv/spec";
import type { z } from "zod";
import type { HostHub } from "../hub/hub.js";
import { randomToken } from "../ids.js";
import { errorMessage, type Log } from "../log.js";
import type { DeploymentRecord } from "../store/records.js";
import type { Store } from "../store/store.js";
import { assertScope, canSee, NotFound, type Principal } from "./access.js";
import type { DeploymentService } from "./deployment-service.js";
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
 * ready; a sweeper destroys those whose TTL ended.
 */
export class SandboxService {
  private sweeping = new Set<string>();

  constructor(
    private readonly store: Store,
    private readonly deployments: DeploymentService,
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
          const d = await this.deployments.change(p, env.project, env.name, "destroy");
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
    if (this.pools) {
      try {
        const version = await this.deployments.resolveVersion(p, req.project, sourceEnv, req.version);
        const sandboxName = checkName("environment", name ?? `sbx-${randomToken(4).slice(0, 6)}`);
        if (!(await this.store.getEnvironment(`${req.project}/${sandboxName}`))) {
          const hit = await this.pools.claim(req.project, version, sandboxName, expiresAt);
          if (hit)
            return { ok: true, env: presentEnvironment(hit.env, this.online), placement: hit.placement };
          name = sandboxName;
        }
      } catch (err) {
        if (!(err instanceof DenvError)) throw err;
        return { ok: false, sandbox: name ? `${req.project}/${name}` : req.project, error: err };
      }
    }
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

  async delete(p: Principal, project: string, env: string): Promise<void> {
    const id = `${project}/${env}`;
    assertScope(p, project, () => NotFound.sandbox(id));
    const e = await this.store.getEnvironment(id);
    if (!e?.sandbox) throw NotFound.sandbox(id);
    const d = await this.deployments.change(p, project, env, "destroy");
    const done = await this.deployments.wait(d.id);
    if (done.status !== "succeeded") raise(done);
  }

  /** Destroys every sandbox past its TTL (one destroy deployment each, not twice at once). */
  async sweep(system: Principal): Promise<number> {
    const expired = await this.store.listEnvironments({
      sandbox: true,
      expiredBefore: new Date().toISOString(),
    });
    let started = 0;
    for (const e of expired) {
      if (this.sweeping.has(e.id)) continue;
      this.sweeping.add(e.id);
      started++;
      this.deployments
        .change(system, e.project, e.name, "destroy")
        .then((d) => this.deployments.wait(d.id))
        .then((d) => this.log.info("sandbox expired and destroyed", { sandbox: e.id, status: d.status }))
        .catch((err: unknown) =>
          this.log.warn("sweeping a sandbox failed", { sandbox: e.id, error: errorMessage(err) }),
        )
        .finally(() => this.sweeping.delete(e.id));
    }
    return started;
  }
}
