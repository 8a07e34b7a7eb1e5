import { DenvError, TargetMessages } from "@denv/spec";
import { nowIso, randomToken } from "../ids.js";
import { errorMessage, type Log } from "../log.js";
import type { MachineRecord, TargetRecord } from "../store/records.js";
import type { Store } from "../store/store.js";
import { DenvdDriver, type TargetDriver } from "./driver.js";
import { HetznerApi, type HetznerServer } from "./hetzner-api.js";
import { cloudInit } from "./install-assets.js";
import type { SecretBox } from "./secret-box.js";

/** What the hetzner driver needs from the rest of the control plane. */
export interface ProvisionDeps {
  store: Store;
  box: SecretBox;
  log: Log;
  hub: ConstructorParameters<typeof DenvdDriver>[1];
  /** This control plane's id: its machines carry it, so two cps sharing a project never touch each other's. */
  cpId: string;
  /** Where new machines reach the cp (fetched when user data is generated). */
  publicUrl(): string;
  /** A single-use join token of `target` for one machine: its id and its secret. */
  mintJoinToken(target: string): Promise<{ id: string; secret: string }>;
  revokeJoinToken(target: string, id: string): Promise<void>;
  /** Removes a host row whose machine is gone (its environments are marked failed). */
  removeHost(hostId: string): Promise<void>;
}

interface HetznerSettings {
  location: string;
  server_type: string;
  image: string;
  min_machines: number;
  max_machines: number;
  idle_shutdown_minutes: number;
  labels: Record<string, string>;
  base_url: string;
}

const ACTIVE: ReadonlySet<MachineRecord["status"]> = new Set(["creating", "running", "joined"]);

/** The labels every server denv creates carries; the reconcile loop lists by them. */
export function denvLabels(cpId: string, target: string): Record<string, string> {
  return { "ai.denv.managed": "true", "ai.denv.cp": cpId, "ai.denv.target": target };
}

/**
 * Hetzner Cloud: machines denv creates in the user's project (servers with user data that installs
 * denvd and joins this target), kept between min_machines and max_machines: placement that finds
 * no host asks `provide` for one, `reconcile` (every --provision-interval-ms) lists the provider's
 * servers by denv's labels, records what joined, deletes what no record accounts for and what
 * stayed idle past idle_shutdown_minutes (never below min_machines), and creates up to the minimum.
 * Everything else is the denvd driver's: the machines are denvd hosts.
 */
export class HetznerDriver extends DenvdDriver implements TargetDriver {
  /** One reconcile or provide at a time per target, so two never count the same machines. */
  private readonly queues = new Map<string, Promise<unknown>>();

  constructor(private readonly deps: ProvisionDeps) {
    super("hetzner", deps.hub);
  }

  provide(target: TargetRecord): Promise<string> {
    return this.serial(target.name, async () => {
      const s = settingsOf(target);
      const active = (await this.deps.store.listMachines(target.name)).filter((m) => ACTIVE.has(m.status));
      const starting = active.find((m) => m.status !== "joined");
      if (starting) return TargetMessages.machineStarting(target.name, starting.id);
      if (active.length >= s.max_machines) return TargetMessages.atMaxMachines(target.name, s.max_machines);
      const m = await this.createMachine(target, s);
      return m.status === "failed"
        ? `no host in target '${target.name}' takes this environment, and creating machine ${m.id} failed: ${m.error}`
        : TargetMessages.machineStarting(target.name, m.id);
    });
  }

  reconcile(target: TargetRecord): Promise<void> {
    return this.serial(target.name, () => this.reconcileNow(target));
  }

  async removeTarget(target: TargetRecord): Promise<void> {
    await this.serial(target.name, async () => {
      const api = this.api(target);
      for (const server of await api.listServers(denvLabels(this.deps.cpId, target.name))) {
        await api.deleteServer(server.id);
        this.deps.log.info("machine deleted", {
          target: target.name,
          machine: server.name,
          reason: "target removed",
        });
      }
    });
  }

  private async reconcileNow(target: TargetRecord): Promise<void> {
    const { store, log } = this.deps;
    const s = settingsOf(target);
    const api = this.api(target);
    const servers = await api.listServers(denvLabels(this.deps.cpId, target.name));
    const byName = new Map(servers.map((v) => [v.name, v]));
    const machines = await store.listMachines(target.name);
    const known = new Map(machines.map((m) => [m.id, m]));
    const now = nowIso();

    // A server with denv's labels that no active record accounts for (a create whose answer was
    // lost, a record deleted by hand): it would cost money unseen, so it goes.
    for (const server of servers) {
      const m = known.get(server.name);
      if (m && ACTIVE.has(m.status)) continue;
      await api.deleteServer(server.id);
      const note = "found at the provider with denv's labels and no record of it: deleted";
      await store.putMachine({
        ...(m ?? { id: server.name, target: target.name, costClass: costClassOf(server, s), createdAt: now }),
        providerId: String(server.id),
        status: "deleted",
        error: note,
        updatedAt: now,
      });
      log.warn("machine deleted", { target: target.name, machine: server.name, reason: note });
    }

    const hosts = new Map((await store.listHosts({ target: target.name })).map((h) => [h.id, h]));
    const envCounts = await store.countEnvironmentsByHost();
    let active = machines.filter((m) => ACTIVE.has(m.status));
    for (const m of active) {
      const server = byName.get(m.id);
      if (!server && m.status !== "creating") {
        await store.putMachine({ ...m, status: "deleted", error: "gone at the provider", updatedAt: now });
        if (m.hostId) await this.deps.removeHost(m.hostId);
        log.warn("machine gone", { target: target.name, machine: m.id });
        continue;
      }
      const host = hosts.get(m.id);
      if (host && host.labels["ai.denv.machine"] === m.id && m.status !== "joined") {
        await store.putMachine({ ...m, status: "joined", hostId: host.id, updatedAt: now });
        if (m.joinTokenId) await this.deps.revokeJoinToken(target.name, m.joinTokenId);
        log.info("machine joined", { target: target.name, machine: m.id });
      }
    }

    // Idle shutdown: a joined machine whose host held no environment for idle_shutdown_minutes.
    active = (await store.listMachines(target.name)).filter((x) => ACTIVE.has(x.status));
    let count = active.length;
    for (const m of active) {
      if (m.status !== "joined" || !m.hostId) continue;
      const busy = (envCounts.get(m.hostId) ?? 0) > 0;
      if (busy) {
        if (m.idleSince) await store.putMachine({ ...m, idleSince: undefined, updatedAt: now });
        continue;
      }
      if (!m.idleSince) {
        await store.putMachine({ ...m, idleSince: now, updatedAt: now });
        continue;
      }
      const idleMs = Date.now() - Date.parse(m.idleSince);
      if (
        s.idle_shutdown_minutes > 0 &&
        idleMs >= s.idle_shutdown_minutes * 60_000 &&
        count > s.min_machines
      ) {
        await this.deleteMachine(target, api, m, `idle for ${s.idle_shutdown_minutes} minutes`);
        count--;
      }
    }
    while (count < s.min_machines) {
      const m = await this.createMachine(target, s);
      if (m.status === "failed") break;
      count++;
    }
  }

  private async deleteMachine(
    target: TargetRecord,
    api: HetznerApi,
    m: MachineRecord,
    why: string,
  ): Promise<void> {
    await this.deps.store.putMachine({ ...m, status: "deleting", updatedAt: nowIso() });
    if (m.providerId) await api.deleteServer(Number(m.providerId));
    if (m.hostId) await this.deps.removeHost(m.hostId);
    await this.deps.store.putMachine({ ...m, status: "deleted", error: why, updatedAt: nowIso() });
    this.deps.log.info("machine deleted", { target: target.name, machine: m.id, reason: why });
  }

  /**
   * Records the machine first (so a crash between the create and its answer leaves a record the
   * reconcile loop matches by name), mints its join token, then creates the server.
   */
  private async createMachine(target: TargetRecord, s: HetznerSettings): Promise<MachineRecord> {
    const { store, log } = this.deps;
    const id = `${target.name.slice(0, 32)}-${randomToken(4)
      .replace(/[^a-z0-9]/g, "")
      .slice(0, 6)}`;
    const jt = await this.deps.mintJoinToken(target.name);
    const at = nowIso();
    let m: MachineRecord = {
      id,
      target: target.name,
      status: "creating",
      costClass: `hetzner/${s.server_type}/${s.location}`,
      joinTokenId: jt.id,
      createdAt: at,
      updatedAt: at,
    };
    await store.putMachine(m);
    try {
      const server = await this.api(target).createServer({
        name: id,
        server_type: s.server_type,
        image: s.image,
        location: s.location,
        labels: { ...s.labels, ...denvLabels(this.deps.cpId, target.name), "ai.denv.machine": id },
        user_data: cloudInit({
          cpUrl: this.deps.publicUrl(),
          joinToken: jt.secret,
          machine: id,
          labels: s.labels,
        }),
      });
      m = {
        ...m,
        providerId: String(server.id),
        status: "running",
        costClass: costClassOf(server, s),
        updatedAt: nowIso(),
      };
      log.info("machine created", { target: target.name, machine: id, cost_class: m.costClass });
    } catch (err) {
      await this.deps.revokeJoinToken(target.name, jt.id);
      m = { ...m, status: "failed", error: errorMessage(err), updatedAt: nowIso() };
      log.warn("machine not created", { target: target.name, machine: id, error: m.error });
    }
    await store.putMachine(m);
    return m;
  }

  private api(target: TargetRecord): HetznerApi {
    if (!target.credentials) throw new DenvError("internal", `target ${target.name} holds no credentials`);
    const token = this.deps.box.open(target.name, target.credentials).api_token;
    if (!token) throw new DenvError("internal", `target ${target.name} holds no api_token`);
    return new HetznerApi(settingsOf(target).base_url, token);
  }

  private serial<T>(target: string, run: () => Promise<T>): Promise<T> {
    const next = (this.queues.get(target) ?? Promise.resolve()).then(run);
    this.queues.set(
      target,
      next.catch(() => undefined),
    );
    return next;
  }
}

function settingsOf(t: TargetRecord): HetznerSettings {
  return t.settings as unknown as HetznerSettings;
}

/** provider/type/location, and the hourly price when the API gives one for that location. */
function costClassOf(server: HetznerServer, s: HetznerSettings): string {
  const type = server.server_type?.name ?? s.server_type;
  const price = server.server_type?.prices.find((p) => p.location === s.location)?.price_hourly.gross;
  return `hetzner/${type}/${s.location}${price ? ` (${Number(price).toFixed(4)}/h gross)` : ""}`;
}
