import { type CreateSandbox, DenvError, type Environment, type ErrorCode, ErrorCodes } from "@denv/spec";
import type { z } from "zod";
import { errorMessage, type Log } from "../log.js";
import type { DeploymentRecord } from "../store/records.js";
import type { Store } from "../store/store.js";
import { assertScope, canSee, NotFound, type Principal } from "./access.js";
import type { DeploymentService } from "./deployment-service.js";
import { presentEnvironment } from "./present.js";

/** A failed deployment's error, raised to the caller that waited for it. */
function raise(d: DeploymentRecord): never {
  const code = d.error?.code ?? "internal";
  throw new DenvError(
    code in ErrorCodes ? (code as ErrorCode) : "internal",
    d.error?.message ?? `deployment ${d.id} failed`,
  );
}

/**
 * Sandboxes: environments for one episode. Creating one forks a version and waits until it is
 * ready; a sweeper destroys those whose TTL ended.
 */
export class SandboxService {
  private sweeping = new Set<string>();

  constructor(
    private readonly store: Store,
    private readonly deployments: DeploymentService,
    private readonly log: Log,
  ) {}

  async create(p: Principal, req: z.output<typeof CreateSandbox>): Promise<Environment> {
    const expiresAt = new Date(Date.now() + req.ttl_sec * 1000).toISOString();
    const alpha = await this.store.getEnvironment(`${req.project}/alpha`);
    const d = await this.deployments.startFork(
      p,
      req.project,
      req.version === undefined && alpha?.version ? "alpha" : undefined,
      req.version,
      req.name,
      { expires_at: expiresAt },
    );
    const done = await this.deployments.wait(d.id);
    if (done.status !== "succeeded") raise(done);
    const env = await this.store.getEnvironment(d.environment);
    if (!env) throw NotFound.sandbox(d.environment);
    return presentEnvironment(env);
  }

  async list(p: Principal): Promise<Environment[]> {
    const all = await this.store.listEnvironments({ sandbox: true });
    return all.filter((e) => canSee(p, e.project)).map(presentEnvironment);
  }

  async delete(p: Principal, project: string, env: string): Promise<void> {
    const id = `${project}/${env}`;
    assertScope(p, project, NotFound.sandbox(id));
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
