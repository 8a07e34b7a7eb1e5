import { DenvError, TargetMessages } from "@denv/spec";
import { nowIso, randomToken } from "../ids.js";
import { errorMessage, type Log } from "../log.js";
import type { MachineRecord, TargetRecord } from "../store/records.js";
import type { Store } from "../store/store.js";
import { DenvdDriver, type TargetDriver } from "./driver.js";
import { cloudInit } from "./install-assets.js";
import type { SecretBox } from "./secret-box.js";

/** What a provisioned driver needs from the rest of the control plane. */
export interface ProvisionDeps {
  store: Store;
  box: SecretBox;
  log: Log;
  hub: ConstructorParameters<typeof DenvdDriver>[1];
  /** This control plane's id: its machines carry it, so two cps sharing an account never touch each other's. */
  cpId: string;
  /** Where new machines reach the cp (fetched when user data is generated). */
  publicUrl(): string;
  /** A single-use join token of `target` for one machine: its id and its secret. */
  mintJoinToken(target: string): Promise<{ id: string; secret: string }>;
  revokeJoinToken(target: string, id: string): Promise<void>;
  /** Removes a host row whose machine is gone (its environments are marked failed). */
  removeHost(hostId: string): Promise<void>;
  /** How long a new machine has to join (its join token lives as long); then it is deleted. */
  joinTimeoutMs: number;
}

/** One machine as the provider lists it. */
export interface ProviderMachine {
  /** The provider's id (a Hetzner server id, an EC2 instance id). */
  providerId: string;
  /** denv's id of the machine (the server's name, the instance's ai.denv.machine tag). */
  machine: string;
  /** provider/type/location, with the price where the provider's API gives one. */
  costClass?: string;
}

/** A cloud account's machines, as a provisioned driver uses them: three calls. */
export interface MachineProvider {
  /** Every machine that is not gone (nor going) and carries all of `labels`. */
  list(labels: Record<string, string>): Promise<ProviderMachine[]>;
  /**
   * Creates and starts a machine named `machine` with `labels` and cloud-init `userData`. A
   * create retried with the same machine id must not make a second machine where the provider
   * has an idempotency key.
   */
  create(req: {
    machine: string;
    labels: Record<string, string>;
    userData: string;
    /** What the user data carries, for a provider that starts denvd itself (a provider bridge). */
    joinToken: string;
    cpUrl: string;
  }): Promise<ProviderMachine>;
  /** Deletes a machine; one already gone is not an error. */
  delete(providerId: string): Promise<void>;
}

/** The settings every provisioned kind has (packages/spec: MACHINES). */
export interface MachineSettings {
  min_machines: number;
  max_machines: number;
  idle_shutdown_minutes: number;
  labels: Record<string, string>;
}

const ACTIVE: ReadonlySet<MachineRecord["status"]> = new Set(["creating", "running", "joined"]);

/** The labels every machine denv creates carries; the reconcile loop lists by them. */
export function denvLabels(cpId: string, target: string): Record<string, string> {
  return { "ai.denv.managed": "true", "ai.denv.cp": cpId, "ai.denv.target": target };
}

/**
 * Machines denv creates in the user's cloud account (with user data that installs denvd and joins
 * this target), kept between min_machines and max_machines: placement that finds no host asks
 * `provide` for one; `reconcile` (every --provision-interval-ms) lists the provider's machines by
 * denv's labels, records what joined, deletes what no record accounts for and what stayed idle
 * past idle_shutdown_minutes (never below min_machines), and creates up to the minimum.
 * Everything else is the denvd driver's: the machines are denvd hosts. A kind gives its
 * provider's three calls and what a machine of its settings costs.
 */
export abstract class ProvisionedDriver extends DenvdDriver implements TargetDriver {
  /** One reconcile or provide at a time per target, so two never count the same machines. */
  private readonly queues = new Map<string, Promise<unknown>>();

  constructor(
    kind: "hetzner" | "aws" | "daytona-docker" | "e2b" | "daytona" | "prime" | "modal",
    protected readonly deps: ProvisionDeps,
  ) {
    super(kind, deps.hub);
  }

  /** The provider's calls, with the target's credentials (opened only for the call). */
  protected abstract provider(target: TargetRecord, credentials: Record<string, string>): MachineProvider;
  /** What a machine of these settings costs, before the provider says more. */
  protected abstract costClass(target: TargetRecord): string;

  /** How many machines the target keeps, and when an idle one goes (the target's settings). */
  protected machineSettings(target: TargetRecord): MachineSettings {
    return target.settings as unknown as MachineSettings;
  }

  provide(target: TargetRecord): Promise<string> {
    return this.serial(target.name, async () => {
      // Removed while this call waited its turn: nothing is created for a target that is gone.
      if (!(await this.deps.store.getTarget(target.name))) return `target ${target.name} not found`;
      const s = this.machineSettings(target);
      const active = (await this.deps.store.listMachines(target.name)).filter((m) => ACTIVE.has(m.status));
      const starting = active.find((m) => m.status !== "joined");
      if (starting) return TargetMessages.machineStarting(target.name, starting.id);
      if (active.length >= s.max_machines) return TargetMessages.atMaxMachines(target.name, s.max_machines);
      const m = await this.createMachine(target);
      return m.status === "failed"
        ? `no host in target '${target.name}' takes this environment, and creating machine ${m.id} failed: ${m.error}`
        : TargetMessages.machineStarting(target.name, m.id);
    });
  }

  reconcile(target: TargetRecord): Promise<void> {
    return this.serial(target.name, () => this.reconcileNow(target));
  }

  exclusive<T>(target: string, fn: () => Promise<T>): Promise<T> {
    return this.serial(target, fn);
  }

  async removeTarget(target: TargetRecord): Promise<void> {
    const api = this.api(target);
    for (const pm of await api.list(denvLabels(this.deps.cpId, target.name))) {
      await api.delete(pm.providerId);
      this.deps.log.info("machine deleted", {
        target: target.name,
        machine: pm.machine,
        reason: "target removed",
      });
    }
  }

  private async reconcileNow(target: TargetRecord): Promise<void> {
    const { store, log } = this.deps;
    // Removed while this call waited its turn: its machines went with it.
    if (!(await store.getTarget(target.name))) return;
    const s = this.machineSettings(target);
    const api = this.api(target);
    const found = await api.list(denvLabels(this.deps.cpId, target.name));
    const byMachine = new Map(found.map((v) => [v.machine, v]));
    const machines = await store.listMachines(target.name);
    const known = new Map(machines.map((m) => [m.id, m]));
    const now = nowIso();

    // A machine with denv's labels that no active record accounts for (a create whose answer was
    // lost, a record deleted by hand): it would cost money unseen, so it goes.
    for (const pm of found) {
      const m = known.get(pm.machine);
      if (m && ACTIVE.has(m.status)) continue;
      await api.delete(pm.providerId);
      const note = "found at the provider with denv's labels and no record of it: deleted";
      await store.putMachine({
        ...(m ?? {
          id: pm.machine,
          target: target.name,
          costClass: pm.costClass ?? this.costClass(target),
          createdAt: now,
        }),
        providerId: pm.providerId,
        status: "deleted",
        error: note,
        updatedAt: now,
      });
      log.warn("machine deleted", { target: target.name, machine: pm.machine, reason: note });
    }

    const hosts = new Map((await store.listHosts({ target: target.name })).map((h) => [h.id, h]));
    const envCounts = await store.countEnvironmentsByHost();
    let active = machines.filter((m) => ACTIVE.has(m.status));
    for (const m of active) {
      if (!byMachine.has(m.id) && m.status !== "creating") {
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

    // A machine that did not join in time never will (its token has expired): a bad image, a
    // cloud-init that failed, a copy of its token used by another host. It would cost money and
    // hold the target's "being created" slot forever, so it goes, and the minimum is made again.
    for (const m of (await store.listMachines(target.name)).filter(
      (x) => x.status === "running" || x.status === "creating",
    )) {
      if (Date.now() - Date.parse(m.createdAt) < this.deps.joinTimeoutMs) continue;
      const why = TargetMessages.notJoined(duration(this.deps.joinTimeoutMs));
      if (m.joinTokenId) await this.deps.revokeJoinToken(target.name, m.joinTokenId);
      await this.deleteMachine(target, api, m, why);
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
      const m = await this.createMachine(target);
      if (m.status === "failed") break;
      count++;
    }
  }

  private async deleteMachine(
    target: TargetRecord,
    api: MachineProvider,
    m: MachineRecord,
    why: string,
  ): Promise<void> {
    await this.deps.store.putMachine({ ...m, status: "deleting", updatedAt: nowIso() });
    if (m.providerId) await api.delete(m.providerId);
    if (m.hostId) await this.deps.removeHost(m.hostId);
    await this.deps.store.putMachine({ ...m, status: "deleted", error: why, updatedAt: nowIso() });
    this.deps.log.info("machine deleted", { target: target.name, machine: m.id, reason: why });
  }

  /**
   * Records the machine first (so a crash between the create and its answer leaves a record the
   * reconcile loop matches by name), mints its join token, then creates the machine.
   */
  private async createMachine(target: TargetRecord): Promise<MachineRecord> {
    const { store, log } = this.deps;
    const s = this.machineSettings(target);
    const id = `${target.name.slice(0, 32)}-${randomToken(4)
      .replace(/[^a-z0-9]/g, "")
      .slice(0, 6)}`;
    const jt = await this.deps.mintJoinToken(target.name);
    const at = nowIso();
    let m: MachineRecord = {
      id,
      target: target.name,
      status: "creating",
      costClass: this.costClass(target),
      joinTokenId: jt.id,
      createdAt: at,
      updatedAt: at,
    };
    await store.putMachine(m);
    try {
      const created = await this.api(target).create({
        machine: id,
        labels: { ...s.labels, ...denvLabels(this.deps.cpId, target.name), "ai.denv.machine": id },
        userData: cloudInit({
          cpUrl: this.deps.publicUrl(),
          joinToken: jt.secret,
          machine: id,
          labels: s.labels,
        }),
        joinToken: jt.secret,
        cpUrl: this.deps.publicUrl(),
      });
      m = {
        ...m,
        providerId: created.providerId,
        status: "running",
        costClass: created.costClass ?? m.costClass,
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

  private api(target: TargetRecord): MachineProvider {
    if (!target.credentials) throw new DenvError("internal", `target ${target.name} holds no credentials`);
    return this.provider(target, this.deps.box.open(target.name, target.credentials));
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

/** 20 minutes, 1.5 s: how the join timeout reads in a machine's error. */
function duration(ms: number): string {
  return ms >= 60_000 && ms % 60_000 === 0 ? `${ms / 60_000} minutes` : `${ms / 1000} s`;
}

/** A credential the store must hold for the kind (parseTargetCredentials checked it at creation). */
export function credential(target: TargetRecord, credentials: Record<string, string>, name: string): string {
  const v = credentials[name];
  if (!v) throw new DenvError("internal", `target ${target.name} holds no ${name}`);
  return v;
}
