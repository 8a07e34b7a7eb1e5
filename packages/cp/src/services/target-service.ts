import {
  ControlPlaneMessages,
  type CreateJoinToken,
  type CreateTarget,
  checkName,
  DenvError,
  JoinToken,
  type Target,
} from "@denv/spec";
import type { z } from "zod";
import { hashSecret, newId, newSecret, nowIso, SecretPrefix } from "../ids.js";
import type { JoinTokenRecord } from "../store/records.js";
import type { Store } from "../store/store.js";
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

/** The target every control plane has from its first start. */
export const LOCAL_TARGET = "local";

export class TargetService {
  constructor(private readonly store: Store) {}

  async ensureLocal(): Promise<void> {
    if (await this.store.getTarget(LOCAL_TARGET)) return;
    await this.store.createTarget({ name: LOCAL_TARGET, kind: "hosts", createdAt: nowIso() });
  }

  async create(p: Principal, req: z.output<typeof CreateTarget>): Promise<Target> {
    requireAdmin(p);
    checkName("project", req.name);
    if (req.kind !== "hosts") {
      throw new DenvError("invalid_request", ControlPlaneMessages.targetKindNotAvailable(req.kind));
    }
    const record = { name: req.name, kind: req.kind, createdAt: nowIso() };
    await this.store.createTarget(record);
    return presentTarget(record);
  }

  /** All targets for an admin; for other tokens, those of the hosts they may list. */
  async list(p: Principal): Promise<Target[]> {
    const targets = await this.store.listTargets();
    if (p.role === "admin") return targets.map(presentTarget);
    const used = new Set((await visibleHosts(this.store, p)).map((h) => h.target));
    return targets.filter((t) => used.has(t.name)).map(presentTarget);
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

  private async requireTarget(p: Principal, target: string): Promise<void> {
    requireAdmin(p);
    if (!(await this.store.getTarget(target))) throw NotFound.target(target);
  }
}
