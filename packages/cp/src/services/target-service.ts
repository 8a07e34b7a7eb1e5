import {
  ControlPlaneMessages,
  type CreateJoinToken,
  type CreateTarget,
  checkName,
  DenvError,
  JoinToken,
  type Machine,
  parseTargetCredentials,
  parseTargetSettings,
  TARGET_KINDS,
  TARGET_SETTINGS,
  type Target,
  type TargetKindInfo,
  TargetKindName,
  TargetMessages,
} from "@denv/spec";
import type { z } from "zod";
import { hashSecret, newId, newSecret, nowIso, SecretPrefix } from "../ids.js";
import { errorMessage, type Log } from "../log.js";
import type { JoinTokenRecord, MachineRecord, TargetRecord } from "../store/records.js";
import type { Store } from "../store/store.js";
import type { TargetDriver, TargetDrivers } from "../targets/driver.js";
import { type Bundle, type BundleFile, installScript } from "../targets/install-assets.js";
import type { SecretBox } from "../targets/secret-box.js";
import { NotFound, type Principal, requireAdmin } from "./access.js";
import { visibleHosts } from "./host-service.js";
import { presentTarget } from "./present.js";

type JoinTokenOut = z.output<typeof JoinToken>;

/** The secret is given only when the token is created. */
function presentJoinToken(t: JoinTokenRecord, secret?: string): JoinTokenOut {
  return JoinToken.parse({
    id: t.id,
    target: t.target,
    token: secret || undefined,
    uses_left: t.usesLeft,
    expires_at: t.expiresAt,
    revoked_at: t.revokedAt || undefined,
    created_at: t.createdAt,
  });
}

function presentMachine(m: MachineRecord): Machine {
  return {
    id: m.id,
    target: m.target,
    provider_id: m.providerId,
    status: m.status,
    cost_class: m.costClass,
    host_id: m.hostId,
    error: m.error,
    created_at: m.createdAt,
    updated_at: m.updatedAt,
  };
}

/** The target every control plane has from its first start. */
export const LOCAL_TARGET = "local";

/** GET /v1/targets/kinds: the capability table, each kind's settings, whether this cp has its driver. */
export function targetKinds(drivers: Pick<TargetDrivers, "has">): TargetKindInfo[] {
  return TargetKindName.options.map((kind) => ({
    kind,
    family: TARGET_KINDS[kind].family,
    available: TARGET_KINDS[kind].available && drivers.has(kind),
    capabilities: { ...TARGET_KINDS[kind].capabilities },
    settings: Object.keys(TARGET_SETTINGS[kind].settings),
    credentials: TARGET_SETTINGS[kind].credentials.map((c) => ({ ...c })),
  }));
}

export class TargetService {
  constructor(
    private readonly store: Store,
    private readonly drivers: TargetDrivers,
    private readonly box: SecretBox,
    private readonly log: Log,
    private readonly install: {
      bundle: BundleFile;
      version: string;
      /** Removes a host of a target being removed (HostService.remove, forced). */
      removeHost: (id: string) => Promise<void>;
    },
  ) {}

  /** The install script of this cp, carrying the SHA-256 of the bundle it serves. */
  async installScript(cpUrl: string): Promise<string> {
    const b = await this.bundle();
    return installScript({ cpUrl, version: b.version, sha256: b.sha256 });
  }

  /** The denvd bundle this cp serves (404 with the way to build it when it is not built). */
  async bundle(): Promise<Bundle & { version: string }> {
    const b = await this.install.bundle.read();
    if (!b) throw new DenvError("not_found", TargetMessages.bundleMissing(this.install.bundle.path));
    return { ...b, version: this.install.version };
  }

  async ensureLocal(): Promise<void> {
    if (await this.store.getTarget(LOCAL_TARGET)) return;
    await this.store.createTarget({ name: LOCAL_TARGET, kind: "hosts", createdAt: nowIso() });
  }

  /** Credentials sealed with a previous key are resealed with the current one (a key rotation). */
  async resealCredentials(): Promise<number> {
    let n = 0;
    for (const t of await this.store.listTargets()) {
      if (!t.credentials || !this.box.isStale(t.credentials)) continue;
      const secrets = this.box.open(t.name, t.credentials);
      await this.store.updateTarget({ ...t, credentials: this.box.seal(t.name, secrets) });
      n++;
    }
    if (n > 0) this.log.info("target credentials resealed with the current key", { targets: n });
    return n;
  }

  kinds(): TargetKindInfo[] {
    return targetKinds(this.drivers);
  }

  /**
   * Refuses a kind without a driver, validates the kind's settings and credentials (one line
   * naming the first that is wrong), seals the credentials, then records the target.
   */
  async create(p: Principal, req: z.output<typeof CreateTarget>): Promise<Target> {
    requireAdmin(p);
    checkName("project", req.name);
    if (!TARGET_KINDS[req.kind].available || !this.drivers.has(req.kind)) {
      throw new DenvError("invalid_request", ControlPlaneMessages.targetKindNotAvailable(req.kind));
    }
    let settings: Record<string, unknown>;
    let credentials: Record<string, string>;
    try {
      settings = parseTargetSettings(req.kind, req.settings);
      credentials = parseTargetCredentials(req.kind, req.credentials);
    } catch (err) {
      throw new DenvError("invalid_request", errorMessage(err));
    }
    const record: TargetRecord = {
      name: req.name,
      kind: req.kind,
      createdAt: nowIso(),
      settings,
      ...(Object.keys(credentials).length > 0 ? { credentials: this.box.seal(req.name, credentials) } : {}),
    };
    await this.store.createTarget(record);
    this.log.info("target created", { target: record.name, kind: record.kind });
    const driver = this.drivers.for(record.kind);
    if (driver.reconcile) {
      // The minimum of machines is created now rather than at the next tick.
      void driver
        .reconcile(record)
        .catch((err: unknown) =>
          this.log.warn("reconcile failed", { target: record.name, error: errorMessage(err) }),
        );
    }
    return presentTarget(record);
  }

  /** All targets for an admin; for other tokens, those of the hosts they may list. */
  async list(p: Principal): Promise<Target[]> {
    const targets = await this.store.listTargets();
    if (p.role === "admin") return targets.map(presentTarget);
    const used = new Set((await visibleHosts(this.store, p)).map((h) => h.target));
    return targets.filter((t) => used.has(t.name)).map(presentTarget);
  }

  async show(p: Principal, name: string): Promise<Target> {
    return presentTarget(await this.requireTarget(p, name));
  }

  /**
   * Removes a target with no hosts and no machines left. `force`: a provisioned target's driver
   * first deletes every server carrying its labels at the provider, and its hosts are removed
   * (their environments marked failed, as `denv hosts rm --force` does).
   */
  async remove(p: Principal, name: string, force = false): Promise<void> {
    const t = await this.requireTarget(p, name);
    if (t.name === LOCAL_TARGET) throw new DenvError("conflict", TargetMessages.localTarget);
    const driver = this.drivers.has(t.kind) ? this.drivers.for(t.kind) : undefined;
    // With no machine being created meanwhile: a create that raced the count would be left running.
    const exclusive = driver?.exclusive?.bind(driver) ?? (<T>(_: string, fn: () => Promise<T>) => fn());
    await exclusive(name, () => this.removeNow(t, driver, force));
  }

  private async removeNow(t: TargetRecord, driver: TargetDriver | undefined, force: boolean): Promise<void> {
    const name = t.name;
    const live = async () => ({
      hosts: await this.store.listHosts({ target: name }),
      machines: (await this.store.listMachines(name)).filter(
        (m) => !["deleted", "failed"].includes(m.status),
      ),
    });
    // Machines the provider could not be asked about are not forgotten: the target stays.
    const removeMachines = async () => {
      try {
        await driver?.removeTarget?.(t);
      } catch (err) {
        if (err instanceof DenvError) throw err;
        throw new DenvError("conflict", TargetMessages.removeFailed(name, errorMessage(err)));
      }
    };
    let left = await live();
    if (force && TARGET_KINDS[t.kind].family !== "hosts") {
      await removeMachines();
      for (const m of left.machines) {
        await this.store.putMachine({
          ...m,
          status: "deleted",
          error: "the target was removed",
          updatedAt: nowIso(),
        });
      }
      for (const h of left.hosts) await this.install.removeHost(h.id);
      left = await live();
    }
    const count = Math.max(left.hosts.length, left.machines.length);
    if (count > 0) throw new DenvError("conflict", TargetMessages.targetInUse(name, count));
    if (!force) await removeMachines();
    for (const jt of await this.store.listJoinTokens(name))
      await this.store.revokeJoinToken(name, jt.id, nowIso());
    await this.store.deleteTarget(name);
    this.log.info("target removed", { target: name });
  }

  async machines(p: Principal, name: string): Promise<Machine[]> {
    const t = await this.requireTarget(p, name);
    if (TARGET_KINDS[t.kind].family === "hosts") {
      throw new DenvError("invalid_request", TargetMessages.notProvisioned(name, t.kind));
    }
    return (await this.store.listMachines(name)).map(presentMachine);
  }

  /** One provisioned target reconciled now; its provider's error is the answer's. */
  async reconcile(p: Principal, name: string): Promise<void> {
    const t = await this.requireTarget(p, name);
    if (TARGET_KINDS[t.kind].family === "hosts") {
      throw new DenvError("invalid_request", TargetMessages.notProvisioned(name, t.kind));
    }
    try {
      await this.drivers.for(t.kind).reconcile?.(t);
    } catch (err) {
      if (err instanceof DenvError) throw err;
      throw new DenvError("conflict", TargetMessages.reconcileFailed(name, errorMessage(err)));
    }
  }

  /** Each provisioned target, reconciled with its provider (the loop control-plane.ts runs). */
  async reconcileAll(): Promise<void> {
    for (const t of await this.store.listTargets()) {
      if (!this.drivers.has(t.kind)) continue;
      const d = this.drivers.for(t.kind);
      if (!d.reconcile) continue;
      await d
        .reconcile(t)
        .catch((err: unknown) =>
          this.log.warn("reconcile failed", { target: t.name, error: errorMessage(err) }),
        );
    }
  }

  async listJoinTokens(p: Principal, target: string): Promise<JoinTokenOut[]> {
    await this.requireTarget(p, target);
    return (await this.store.listJoinTokens(target)).map((t) => presentJoinToken(t));
  }

  /** Revoked tokens join no more hosts; hosts that joined with one keep their credentials. */
  async revokeJoinToken(p: Principal, target: string, id: string): Promise<void> {
    await this.requireTarget(p, target);
    if (!(await this.store.revokeJoinToken(target, id, nowIso()))) throw NotFound.joinToken(id);
  }

  /** A join token for `target`: `denvj_<random>`, hashed at rest, expiring, with a use count. */
  async createJoinToken(
    p: Principal,
    target: string,
    req: z.output<typeof CreateJoinToken>,
  ): Promise<JoinTokenOut> {
    await this.requireTarget(p, target);
    return this.mintJoinToken(target, req);
  }

  /** A join token without the admin check (a provisioned machine's single-use one). */
  async mintJoinToken(target: string, req: z.output<typeof CreateJoinToken>): Promise<JoinTokenOut> {
    const secret = newSecret(SecretPrefix.join);
    const record = {
      id: newId("jt"),
      target,
      hash: hashSecret(secret),
      usesLeft: req.uses,
      expiresAt: new Date(Date.now() + req.ttl_sec * 1000).toISOString(),
      createdAt: nowIso(),
    };
    await this.store.createJoinToken(record);
    return presentJoinToken(record, secret);
  }

  private async requireTarget(p: Principal, target: string): Promise<TargetRecord> {
    requireAdmin(p);
    const t = await this.store.getTarget(target);
    if (!t) throw NotFound.target(target);
    return t;
  }
}
