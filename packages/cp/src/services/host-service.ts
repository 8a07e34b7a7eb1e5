import {
  DenvError,
  type HelloFrame,
  type Host,
  HostMessages,
  type JoinRequest,
  JoinResponse,
  JoinTokenMessages,
  NAME_PATTERN,
  RemovedHost,
} from "@denv/spec";
import type { z } from "zod";
import type { HostLifecycle } from "../hub/hub.js";
import { hashSecret, newSecret, nowIso, randomToken, SecretPrefix } from "../ids.js";
import type { Log } from "../log.js";
import type { HostRecord, JoinTokenRecord } from "../store/records.js";
import type { Store } from "../store/store.js";
import { canSee, NotFound, type Principal, requireAdmin } from "./access.js";
import type { HostListCache } from "./host-list-cache.js";
import { presentHost } from "./present.js";

/**
 * The hosts a principal may list: all of them for an admin; for any other token, the hosts that
 * environments of the projects it may see run on (a scoped token: its project's). The host
 * inventory (idle machines, their labels and capacity) is the operator's, not a project's.
 */
export async function visibleHosts(store: Store, p: Principal): Promise<HostRecord[]> {
  const hosts = await store.listHosts();
  if (p.role === "admin") return hosts;
  const used = await hostsInUse(store, p);
  return hosts.filter((h) => used.has(h.id));
}

/** The hosts that environments of the projects a non-admin `p` may see run on. */
async function hostsInUse(store: Store, p: Principal): Promise<Set<string | undefined>> {
  const envs = await store.listEnvironments(p.project === undefined ? {} : { project: p.project });
  return new Set(envs.filter((e) => canSee(p, e.project)).map((e) => e.hostId));
}

/** A page of GET /v1/hosts: at most `limit` hosts, those whose id sorts after `after`. */
export interface HostPage {
  limit: number;
  after?: string;
}

/** The index of the first host (of a list sorted by id) whose id sorts after `id`. */
function firstAbove(hosts: readonly Host[], id: string): number {
  let lo = 0;
  let hi = hosts.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if ((hosts[mid] as Host).id <= id) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** Why a join token joins no host, or undefined when it may. */
function joinRefusal(token: JoinTokenRecord): string | undefined {
  if (token.revokedAt !== undefined) return JoinTokenMessages.revoked;
  if (Date.parse(token.expiresAt) <= Date.now()) return JoinTokenMessages.expired;
  if (token.usesLeft <= 0) return JoinTokenMessages.usedUp;
  return undefined;
}

/**
 * Hosts: joining with a join token, authenticating the stream with the host credential, and
 * what the hub reports (online with a hello, offline), including the reconciliation of what the
 * cp thinks a host holds against what the host says it holds.
 */
export class HostService implements HostLifecycle {
  constructor(
    private readonly store: Store,
    /** The presented list over the same store (its writes invalidate it). */
    private readonly hosts: HostListCache,
    private readonly log: Log,
    /** Closes a host's stream now (the hub's; the hub takes this service as its lifecycle). */
    private readonly disconnect: (hostId: string, reason: string) => void,
  ) {}

  async join(req: z.output<typeof JoinRequest>): Promise<z.output<typeof JoinResponse>> {
    const token = req.token.startsWith(SecretPrefix.join)
      ? await this.store.joinTokenByHash(hashSecret(req.token))
      : undefined;
    // A token of another target is "not valid" rather than "wrong target": it tells a caller
    // holding a stray token nothing about the targets that exist.
    if (!token || (req.target !== undefined && req.target !== token.target)) {
      throw new DenvError("unauthorized", JoinTokenMessages.invalid);
    }
    const refusal = joinRefusal(token);
    if (refusal !== undefined) throw new DenvError("unauthorized", refusal);
    if (!(await this.store.consumeJoinToken(token.id))) {
      // Another join took the last use, or an admin revoked it, since it was read.
      const now = await this.store.joinTokenByHash(token.hash);
      throw new DenvError("unauthorized", (now && joinRefusal(now)) ?? JoinTokenMessages.usedUp);
    }
    const credential = newSecret(SecretPrefix.host);
    const host: HostRecord = {
      id: await this.freeHostId(req.name),
      target: token.target,
      credentialHash: hashSecret(credential),
      status: "offline",
      labels: req.labels,
      createdAt: nowIso(),
    };
    await this.store.createHost(host);
    this.log.info("host joined", { host: host.id, target: host.target });
    return JoinResponse.parse({ host_id: host.id, credential, target: host.target });
  }

  /** The host a stream credential belongs to (401 otherwise). */
  async authenticate(header: string | undefined): Promise<HostRecord> {
    const m = /^Bearer\s+(denvh_\S+)$/i.exec(header ?? "");
    const host = m?.[1] ? await this.store.hostByCredentialHash(hashSecret(m[1])) : undefined;
    if (!host) throw new DenvError("unauthorized", HostMessages.credentialInvalid);
    return host;
  }

  /**
   * One page of the hosts `p` may list, by id: at most `limit` of them after the id `after`
   * (which need not be a host that still exists). `next` is set when more follow.
   */
  async list(p: Principal, page: HostPage): Promise<{ hosts: Host[]; next?: string }> {
    const all = await this.hosts.list();
    let visible: readonly Host[] = all;
    if (p.role !== "admin") {
      const used = await hostsInUse(this.store, p);
      visible = all.filter((h) => used.has(h.id));
    }
    const after = page.after;
    const start = after === undefined ? 0 : firstAbove(visible, after);
    const hosts = visible.slice(start, start + page.limit);
    const last = hosts.at(-1);
    return start + hosts.length < visible.length && last ? { hosts, next: last.id } : { hosts };
  }

  /** Placement never picks the host again; what it runs and holds stays where it is. */
  async drain(p: Principal, id: string): Promise<Host> {
    requireAdmin(p);
    if (!(await this.store.drainHost(id, nowIso()))) throw NotFound.host(id);
    this.log.info("host draining", { host: id });
    return this.present(id);
  }

  /**
   * Forgets a host and revokes its credential: its stream closes now and a reconnect gets 401.
   * Refused while it holds environments unless `force`; forced, they are marked failed and left
   * on no host (destroying one then just forgets it). Its replicas are dropped: a version another
   * host holds lives on there (its origin moves there if it was this one); a version only it
   * held is forgotten, since nothing can restore it. Each step can be retried: the host row goes
   * last, after a drain that keeps placement away meanwhile.
   */
  async remove(p: Principal, id: string, force: boolean): Promise<z.output<typeof RemovedHost>> {
    requireAdmin(p);
    if (!(await this.store.getHost(id))) throw NotFound.host(id);
    const envs = await this.store.listEnvironments({ hostId: id });
    if (envs.length > 0 && !force)
      throw new DenvError("conflict", HostMessages.holdsEnvironments(id, envs.length));
    await this.store.drainHost(id, nowIso());
    const at = nowIso();
    for (const env of envs) {
      const { hostId: _host, hostEnv: _hostEnv, ...rest } = env;
      await this.store.putEnvironment({
        ...rest,
        status: "failed",
        evidence: { ...env.evidence, removed: { at, host: id, reason: `host ${id} was removed` } },
        updatedAt: at,
      });
    }
    const lost: string[] = [];
    const dropped: string[] = [];
    for (const version of await this.store.listReplicasOnHost(id)) {
      const left = await this.store.deleteReplica(version, id);
      if (left.length > 0) dropped.push(version);
      else {
        await this.store.deleteVersion(version);
        lost.push(version);
      }
    }
    await this.store.deleteHost(id);
    this.disconnect(id, `host ${id} was removed`);
    this.log.warn("host removed", {
      host: id,
      environments: envs.length,
      versions: lost.length,
      replicas_dropped: dropped.length,
    });
    return RemovedHost.parse({
      id,
      environments: envs.map((e) => e.id),
      versions: lost,
      replicas_dropped: dropped,
    });
  }

  async online(hostId: string, hello: HelloFrame): Promise<void> {
    const now = nowIso();
    const host = await this.store.getHost(hostId);
    if (!host) throw new Error(`host ${hostId} is not known`);
    await this.store.updateHost({
      ...host,
      status: "online",
      version: hello.version,
      // The join request's labels are the operator's: the host's own labels add to them and never
      // replace one (a host cannot make itself eligible for what the operator did not give it).
      labels: { ...hello.labels, ...host.labels },
      capacity: boundCapacity(hello.capacity),
      lastSeenAt: now,
    });
    const held = new Set(hello.environments.map((e) => e.id));
    for (const env of await this.store.listEnvironments({ hostId })) {
      // Pending environments belong to a deployment in flight, which settles them itself.
      if (env.status === "pending" || env.status === "failed" || !env.hostEnv) continue;
      if (held.has(`${env.project}/${env.hostEnv}`)) continue;
      await this.store.putEnvironment({
        ...env,
        status: "failed",
        evidence: { ...env.evidence, reconcile: { at: now, reason: `host ${hostId} no longer holds it` } },
        updatedAt: now,
      });
      this.log.warn("environment missing on its host: marked failed", { environment: env.id, host: hostId });
    }
    await this.reconcileReplicas(hostId, hello.versions, now);
    this.log.info("host online", { host: hostId, unfinished: hello.unfinished.length });
  }

  /**
   * The replicas the cp records on a host against the versions its hello says it holds. One the
   * host no longer holds is dropped (a version no host holds any more is forgotten). What the
   * host holds beyond them is never recorded: only the cp makes a host a holder, by a snapshot
   * or a transfer it asked for. Replicas recorded since the hello arrived are left alone: results
   * that follow a hello (a snapshot that finished meanwhile) are recorded while this runs.
   */
  private async reconcileReplicas(
    hostId: string,
    reported: readonly string[],
    helloAt: string,
  ): Promise<void> {
    const held = new Set(reported);
    const recorded = await this.store.listReplicasOnHost(hostId, helloAt);
    for (const version of recorded) {
      if (held.has(version)) continue;
      const left = await this.store.deleteReplica(version, hostId);
      this.log.warn("version missing on its host: replica dropped", { version, host: hostId, holders: left });
      if (left.length === 0) {
        await this.store.deleteVersion(version);
        this.log.warn("version lost: no host holds it any more", { version });
      }
    }
    const known = new Set(recorded);
    const unknown = reported.filter((v) => !known.has(v));
    if (unknown.length > 0)
      this.log.info("host holds versions the control plane did not record there: not counted", {
        host: hostId,
        versions: unknown,
      });
  }

  async offline(hostId: string, reason: string): Promise<void> {
    const host = await this.store.getHost(hostId);
    if (!host) return;
    await this.store.updateHost({ ...host, status: "offline" });
    this.log.warn("host offline", { host: hostId, reason });
  }

  /** At start nobody is connected yet, whatever the store remembers. */
  async markAllOffline(): Promise<void> {
    for (const h of await this.store.listHosts()) {
      if (h.status === "online") await this.store.updateHost({ ...h, status: "offline" });
    }
  }

  private async present(id: string): Promise<Host> {
    const [host, counts] = await Promise.all([this.store.getHost(id), this.store.countEnvironmentsByHost()]);
    if (!host) throw NotFound.host(id);
    return presentHost(host, counts.get(id) ?? 0);
  }

  private async freeHostId(name: string | undefined): Promise<string> {
    const base = name && NAME_PATTERN.test(name) ? name : "host";
    if (name && base === name && !(await this.store.getHost(base))) return base;
    for (;;) {
      const id = `${base.slice(0, 32)}-${randomToken(4).slice(0, 6)}`;
      if (!(await this.store.getHost(id))) return id;
    }
  }
}

/** The most one host may claim: placement ranks hosts by these, so a claim past them is cut. */
export const CAPACITY_BOUNDS = {
  cpus: 1024,
  memory_bytes: 64 * 1024 ** 4,
  disk_free_bytes: 1024 ** 5,
  /** Linux's largest pid_max. */
  pids: 4 * 1024 ** 2,
} as const;

/** A hello's capacity within CAPACITY_BOUNDS (negative or non-finite claims count as 0). */
export function boundCapacity(c: HelloFrame["capacity"]): HelloFrame["capacity"] {
  const bound = (v: number, max: number) => (Number.isFinite(v) && v > 0 ? Math.min(v, max) : 0);
  return {
    cpus: bound(c.cpus, CAPACITY_BOUNDS.cpus),
    memory_bytes: bound(c.memory_bytes, CAPACITY_BOUNDS.memory_bytes),
    disk_free_bytes: bound(c.disk_free_bytes, CAPACITY_BOUNDS.disk_free_bytes),
    ...(c.pids !== undefined ? { pids: bound(c.pids, CAPACITY_BOUNDS.pids) } : {}),
  };
}
