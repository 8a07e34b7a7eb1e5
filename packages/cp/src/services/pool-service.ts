import {
  DenvError,
  type EgressProbe,
  MAX_POOL_SIZE,
  PlacementEvidence,
  type Pool,
  PoolMessages,
  type ProbeEvidence,
} from "@denv/spec";
import type { HostHub } from "../hub/hub.js";
import { newId, nowIso } from "../ids.js";
import { errorMessage, type Log } from "../log.js";
import type { EnvironmentRecord, PoolRecord } from "../store/records.js";
import type { Store } from "../store/store.js";
import { assertScope, NotFound, type Principal, requireAdmin } from "./access.js";
import type { DeploymentService } from "./deployment-service.js";

/**
 * Warm fork pools (docs/how-to/warm-pools.md). Per project, forks of its current version kept
 * started, healthy and probed at the pool's size, so that a sandbox claims one instead of
 * forking cold. A member is an ordinary fork marked `pool` in the store: placed like any fork,
 * counted against its host's room, resumed by the engine after a restart, and never listed as
 * an environment. A claim re-runs the egress probe on the member first: a member that fails it
 * is destroyed, never handed out. A new current version retires the old members.
 */

/** How many member forks one project starts at a time. */
const FILL_CONCURRENCY = 2;

export interface Claimed {
  env: EnvironmentRecord;
  placement: PlacementEvidence;
}

export class PoolService {
  /** Projects whose claims run one at a time (so two claims never take one member). */
  private claiming = new Map<string, Promise<unknown>>();
  /** Members being destroyed (retired or discarded), not counted and not claimed. */
  private leaving = new Set<string>();
  /** Projects whose last member fork failed: no new one before this time (ms), so a pool that
   * does not fit is not retried every pass. */
  private backoff = new Map<string, number>();
  /** Member forks this service started and has not seen settle, by deployment id. */
  private starting = new Map<string, string>();
  /**
   * Where each member's fork placed it, kept when its fork settles: a claim answers with it
   * without reading the project's deployments (a scan that grows with every episode).
   */
  private placements = new Map<string, PlacementEvidence>();
  /**
   * Sandbox requests in progress per project: a claim, and after a miss the cold fork it falls
   * back to. The pool does not refill meanwhile, so that a refill never takes the room a sandbox
   * asked for now (members a failed probe discarded still hold theirs until they are destroyed).
   */
  private demand = new Map<string, number>();
  private timer: NodeJS.Timeout | undefined;
  private ticking: Promise<void> | undefined;
  private again = false;

  constructor(
    private readonly store: Store,
    private readonly deployments: DeploymentService,
    private readonly hub: Pick<HostHub, "isOnline" | "send">,
    private readonly log: Log,
    private readonly system: Principal,
    private readonly opts: { commandTimeoutMs: number; intervalMs: number },
  ) {}

  /** Keeps every pool at its size, every intervalMs and after each claim. */
  start(): void {
    this.timer = setInterval(() => this.kick(), this.opts.intervalMs);
    this.timer.unref();
    this.kick();
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    await this.ticking;
  }

  /** Runs a refill pass now (or right after the one running). */
  kick(): void {
    if (this.ticking) {
      this.again = true;
      return;
    }
    this.ticking = this.tick()
      .catch((err: unknown) => this.log.warn("pool refill failed", { error: errorMessage(err) }))
      .finally(() => {
        this.ticking = undefined;
        if (this.again && this.timer) {
          this.again = false;
          this.kick();
        }
      });
  }

  /** The pool's size and where it comes from; a service project's file size does not count. */
  private async sizeOf(project: string, rec?: PoolRecord): Promise<{ size: number; source: Pool["source"] }> {
    if (rec?.sizeSet !== undefined) return { size: rec.sizeSet, source: "set" };
    const kind = (await this.store.getProject(project))?.kind;
    if (rec?.sizeFile !== undefined && rec.sizeFile > 0 && kind === "rl-environment")
      return { size: rec.sizeFile, source: "file" };
    return { size: 0, source: "off" };
  }

  /** The version a sandbox without `version` gets (what `alpha` runs, else the newest). */
  private async currentVersion(project: string): Promise<string | undefined> {
    const alpha = await this.store.getEnvironment(`${project}/alpha`);
    if (alpha?.version) return alpha.version;
    return (await this.store.listVersions(project))[0]?.id;
  }

  private async members(project?: string): Promise<EnvironmentRecord[]> {
    const all = await this.store.listEnvironments({ ...(project ? { project } : {}), pool: true });
    return all.filter((e) => !this.leaving.has(e.id));
  }

  async list(p: Principal): Promise<Pool[]> {
    const projects = new Set((await this.store.listPools()).map((r) => r.project));
    for (const m of await this.members()) projects.add(m.project);
    const out: Pool[] = [];
    for (const project of [...projects].sort()) {
      if (p.project !== undefined && p.project !== project) continue;
      out.push(await this.present(project));
    }
    return out;
  }

  async show(p: Principal, project: string): Promise<Pool> {
    assertScope(p, project, () => NotFound.project(project));
    if (!(await this.store.getProject(project))) throw NotFound.project(project);
    return this.present(project);
  }

  private async present(project: string): Promise<Pool> {
    const { size, source } = await this.sizeOf(project, await this.store.getPool(project));
    const version = await this.currentVersion(project);
    const members = (await this.members(project)).filter((m) => m.version === version);
    return {
      project,
      ...(version ? { version } : {}),
      size,
      source,
      ready: members.filter((m) => m.status === "running").length,
      filling: members.filter((m) => m.status === "pending").length,
    };
  }

  /** An admin's size for a project's pool (null: back to the file's x-denv.pool). */
  async set(p: Principal, project: string, size: number | null): Promise<Pool> {
    requireAdmin(p);
    if (!(await this.store.getProject(project))) throw NotFound.project(project);
    if (size !== null && !(Number.isInteger(size) && size >= 0 && size <= MAX_POOL_SIZE)) {
      throw new DenvError("invalid_request", PoolMessages.badSize(String(size)));
    }
    const rec = await this.store.getPool(project);
    const { sizeSet: _set, ...rest } = rec ?? { project };
    await this.store.putPool({
      ...rest,
      project,
      ...(size !== null ? { sizeSet: size } : {}),
      updatedAt: nowIso(),
    });
    this.backoff.delete(project);
    this.kick();
    return this.present(project);
  }

  /** What a deploy's file asks for (x-denv.pool), recorded as the project's default. */
  async recordFileSize(project: string, size: number | undefined): Promise<void> {
    const rec = await this.store.getPool(project);
    if (rec?.sizeFile === size) return;
    const { sizeFile: _file, ...rest } = rec ?? { project };
    await this.store.putPool({
      ...rest,
      project,
      ...(size !== undefined ? { sizeFile: size } : {}),
      updatedAt: nowIso(),
    });
    this.kick();
  }

  /** One pass: retire members of old versions and of pools turned down, start what is missing. */
  private async tick(): Promise<void> {
    const byProject = new Map<string, EnvironmentRecord[]>();
    for (const m of await this.members()) byProject.set(m.project, [...(byProject.get(m.project) ?? []), m]);
    for (const r of await this.store.listPools()) if (!byProject.has(r.project)) byProject.set(r.project, []);
    for (const [project, members] of byProject) {
      const { size } = await this.sizeOf(project, await this.store.getPool(project));
      const version = await this.currentVersion(project);
      const live = members.filter(
        (m) => m.version === version && (m.status === "running" || m.status === "pending"),
      );
      const keep = new Set(live.slice(0, size).map((m) => m.id));
      for (const m of members) if (!keep.has(m.id) && m.status !== "pending") this.retire(m, "retired");
      if (!version || size === 0 || (this.backoff.get(project) ?? 0) > Date.now()) continue;
      if ((this.demand.get(project) ?? 0) > 0) continue;
      const filling = live.filter((m) => m.status === "pending").length;
      const missing = Math.min(size - Math.min(live.length, size), FILL_CONCURRENCY - filling);
      for (let i = 0; i < missing; i++) {
        try {
          const d = await this.deployments.startFork(
            this.system,
            project,
            undefined,
            version,
            `pool-${newId("p").slice(-8).toLowerCase()}`,
            undefined,
            true,
          );
          this.watch(project, d.id);
        } catch (err) {
          this.log.warn("pool fork could not start", { project, error: errorMessage(err) });
          break;
        }
      }
    }
  }

  /** A member fork that fails (no room, a host error) holds its pool's refill back a while. */
  private watch(project: string, deployment: string): void {
    this.starting.set(deployment, project);
    this.deployments
      .wait(deployment)
      .then((d) => {
        const placed = PlacementEvidence.safeParse(d.phases.find((ph) => ph.name === "place")?.evidence);
        if (d.status === "succeeded" && placed.success) this.placements.set(d.environment, placed.data);
        if (d.status === "failed") {
          this.backoff.set(project, Date.now() + 20 * this.opts.intervalMs);
          this.log.warn("pool fork failed", { project, error: d.error?.message });
        } else this.backoff.delete(project);
      })
      .catch(() => undefined)
      .finally(() => {
        this.starting.delete(deployment);
        this.kick();
      });
  }

  /** Destroys a member in the background (it is never claimed meanwhile). */
  private retire(m: EnvironmentRecord, why: string): void {
    if (this.leaving.has(m.id)) return;
    this.leaving.add(m.id);
    this.deployments
      .change(this.system, m.project, m.name, "destroy")
      .then((d) => this.deployments.wait(d.id))
      .then((d) => this.log.info(`pool member ${why}`, { member: m.id, status: d.status }))
      .catch((err: unknown) =>
        this.log.warn("pool member destroy failed", { member: m.id, error: errorMessage(err) }),
      )
      .finally(() => {
        this.leaving.delete(m.id);
        this.placements.delete(m.id);
        this.kick();
      });
  }

  /**
   * A ready member of `version` becomes sandbox `project/name`, after its egress probe passed
   * again; undefined when none is ready: the caller forks cold, then calls `coldForkDone`
   * (the pool's refill waits for it).
   */
  claim(project: string, version: string, name: string, expiresAt: string): Promise<Claimed | undefined> {
    this.demand.set(project, (this.demand.get(project) ?? 0) + 1);
    const prev = this.claiming.get(project) ?? Promise.resolve();
    const next = prev.then(async () => {
      const claimed = await this.claimNow(project, version, name, expiresAt).catch((err: unknown) => {
        this.coldForkDone(project);
        throw err;
      });
      if (claimed) this.coldForkDone(project);
      return claimed;
    });
    const settled = next.catch(() => undefined);
    this.claiming.set(project, settled);
    void settled.finally(() => {
      if (this.claiming.get(project) === settled) this.claiming.delete(project);
    });
    return next;
  }

  /** The cold fork after a missed claim of `project` is done (or failed): the pool may refill. */
  coldForkDone(project: string): void {
    const n = (this.demand.get(project) ?? 1) - 1;
    if (n > 0) this.demand.set(project, n);
    else this.demand.delete(project);
    this.kick();
  }

  private async claimNow(
    project: string,
    version: string,
    name: string,
    expiresAt: string,
  ): Promise<Claimed | undefined> {
    const ready = (await this.members(project))
      .filter(
        (m) =>
          m.version === version &&
          m.status === "running" &&
          m.hostId &&
          m.hostEnv &&
          this.hub.isOnline(m.hostId),
      )
      .sort((a, b) => a.createdAt.localeCompare(b.createdAt));
    for (const m of ready) {
      this.leaving.add(m.id);
      let probe: EgressProbe | { skipped: string };
      try {
        probe = await this.reprobe(m);
      } catch (err) {
        this.leaving.delete(m.id);
        this.discard(m, errorMessage(err));
        continue;
      }
      if ("ok" in probe && !probe.ok) {
        this.leaving.delete(m.id);
        this.discard(m, probe.findings.join("; "));
        continue;
      }
      const at = nowIso();
      const env: EnvironmentRecord = {
        ...m,
        id: `${project}/${name}`,
        name,
        pool: false,
        sandbox: true,
        expiresAt,
        evidence: { ...m.evidence, pool: { claim: "hit", member: m.id, claimed_at: at, probe } },
        updatedAt: at,
      };
      // The sandbox's record first: a crash in between leaves two records of one host
      // environment, and the pool member's is the one dropped (reconcile).
      await this.store.putEnvironment(env);
      await this.store.deleteEnvironment(m.id);
      this.leaving.delete(m.id);
      // The refill starts once the answer is out: its store writes and fork request would
      // otherwise run between the claim's last step and the answer.
      // Not after stop(): a claim that ends while the control plane stops refills nothing.
      setImmediate(() => {
        if (this.timer) this.kick();
      });
      return { env, placement: await this.placementOf(m) };
    }
    return undefined;
  }

  /** The probe again, now: a member's isolation must still hold when it is handed out. */
  private async reprobe(m: EnvironmentRecord): Promise<ProbeEvidence> {
    const before = m.evidence?.probe as ProbeEvidence | undefined;
    if (before && "skipped" in before) return before;
    return this.hub.send(
      m.hostId as string,
      "env.probe_egress",
      { environment: `${m.project}/${m.hostEnv}` },
      { id: newId("cmd"), timeoutMs: this.opts.commandTimeoutMs, durable: false },
    );
  }

  private discard(m: EnvironmentRecord, why: string): void {
    this.log.warn(PoolMessages.discarded(m.id, why), { member: m.id });
    this.retire(m, "discarded");
  }

  private async placementOf(m: EnvironmentRecord): Promise<PlacementEvidence> {
    const kept = this.placements.get(m.id);
    this.placements.delete(m.id);
    if (kept) return kept;
    // A member this process did not see forked (it was made before a restart).
    const forks = await this.store.listDeployments({ project: m.project });
    const d = forks.find((x) => x.kind === "fork" && x.environment === m.id);
    const parsed = PlacementEvidence.safeParse(d?.phases.find((ph) => ph.name === "place")?.evidence);
    if (parsed.success) return parsed.data;
    return {
      host: m.hostId ?? "",
      reason: "a warm fork of the pool",
      need: { memory_bytes: 0, cpus: 0, pids: 0 },
      labels: {},
      candidates: [],
    };
  }
}
