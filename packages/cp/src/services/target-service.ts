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
import type { Store } from "../store/store.js";
import { NotFound, type Principal, requireAdmin } from "./access.js";
import { presentTarget } from "./present.js";

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

  async list(): Promise<Target[]> {
    return (await this.store.listTargets()).map(presentTarget);
  }

  /** A join token for `target`: `denvj_<random>`, hashed at rest, expiring, with a use count. */
  async createJoinToken(
    p: Principal,
    target: string,
    req: z.output<typeof CreateJoinToken>,
  ): Promise<z.output<typeof JoinToken>> {
    requireAdmin(p);
    if (!(await this.store.getTarget(target))) throw NotFound.target(target);
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
    return JoinToken.parse({
      id: record.id,
      target,
      token: secret,
      uses_left: record.usesLeft,
      expires_at: record.expiresAt,
      created_at: record.createdAt,
    });
  }
}
