import { mkdir, readFile, writeFile } from "node:fs/promises";
import { dirname } from "node:path";
import { ApiToken, type CreateApiToken, checkName, DenvError, HostMessages } from "@denv/spec";
import type { z } from "zod";
import { hashSecret, newId, newSecret, nowIso, SecretPrefix } from "../ids.js";
import type { TokenRecord } from "../store/records.js";
import type { Store } from "../store/store.js";
import { NotFound, type Principal, requireAdmin } from "./access.js";

type ApiTokenOut = z.output<typeof ApiToken>;

function present(t: TokenRecord, secret?: string): ApiTokenOut {
  return ApiToken.parse({
    id: t.id,
    name: t.name,
    role: t.role,
    project: t.project || undefined,
    token: secret || undefined,
    created_at: t.createdAt,
  });
}

/**
 * API tokens: `denv_<random>`, stored as sha256, shown once at creation. Every request
 * authenticates, so the tokens found are kept by hash; only this service writes tokens, and a
 * deletion drops them all (a lookup that a deletion overtook is not kept).
 */
export class AuthService {
  private readonly known = new Map<string, TokenRecord>();
  /** Bumped by every deletion: a lookup started before one does not fill `known`. */
  private deletions = 0;

  constructor(private readonly store: Store) {}

  /** Resolves an `Authorization` header to a principal (401 when missing or unknown). */
  async authenticate(header: string | undefined): Promise<Principal> {
    const m = /^Bearer\s+(\S+)$/i.exec(header ?? "");
    if (!m?.[1]) {
      throw new DenvError("unauthorized", "missing API token: send 'Authorization: Bearer <token>'");
    }
    if (m[1].startsWith(SecretPrefix.host))
      throw new DenvError("unauthorized", HostMessages.credentialNotApiToken);
    const hash = hashSecret(m[1]);
    let token = this.known.get(hash);
    if (!token) {
      const deletions = this.deletions;
      token = await this.store.tokenByHash(hash);
      if (token && deletions === this.deletions) this.known.set(hash, token);
    }
    if (!token) throw new DenvError("unauthorized", "API token is not valid");
    return {
      tokenId: token.id,
      name: token.name,
      role: token.role,
      project: token.project || undefined,
    };
  }

  async create(p: Principal, req: z.output<typeof CreateApiToken>): Promise<ApiTokenOut> {
    requireAdmin(p);
    if (req.project !== undefined) {
      checkName("project", req.project);
      if (!(await this.store.getProject(req.project))) throw NotFound.project(req.project);
    }
    const secret = newSecret(SecretPrefix.api);
    const record: TokenRecord = {
      id: newId("tok"),
      name: req.name,
      role: req.role,
      project: req.project || undefined,
      hash: hashSecret(secret),
      createdAt: nowIso(),
    };
    await this.store.createToken(record);
    return present(record, secret);
  }

  async list(p: Principal): Promise<ApiTokenOut[]> {
    requireAdmin(p);
    return (await this.store.listTokens()).map((t) => present(t));
  }

  async delete(p: Principal, id: string): Promise<void> {
    requireAdmin(p);
    let deleted: boolean;
    try {
      deleted = await this.store.deleteToken(id);
    } finally {
      this.deletions++;
      this.known.clear();
    }
    if (!deleted) throw NotFound.token(id);
  }

  /**
   * The first start creates an admin token and writes it to `file` (mode 0600). A later start
   * reads the file and never writes it again. A database with no admin token at all (a new
   * one) adopts the file's token so the file keeps working; a token revoked from a database
   * that has other admins stays revoked (remove the file to get a new one at the next start).
   */
  async ensureAdminToken(file: string): Promise<string> {
    let secret: string | undefined;
    try {
      secret = (await readFile(file, "utf8")).trim();
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "ENOENT") throw err;
    }
    if (secret) {
      if (!secret.startsWith(SecretPrefix.api)) {
        throw new DenvError("invalid_request", `${file} does not hold a denv API token`);
      }
      if (!(await this.store.tokenByHash(hashSecret(secret)))) {
        const admins = (await this.store.listTokens()).filter((t) => t.role === "admin");
        if (admins.length === 0) await this.insertAdmin(secret);
      }
      return secret;
    }
    secret = newSecret(SecretPrefix.api);
    await mkdir(dirname(file), { recursive: true, mode: 0o700 });
    // "wx": two processes starting at once must not both think they created it.
    await writeFile(file, `${secret}\n`, { mode: 0o600, flag: "wx" });
    await this.insertAdmin(secret);
    return secret;
  }

  private insertAdmin(secret: string): Promise<void> {
    return this.store.createToken({
      id: newId("tok"),
      name: "admin",
      role: "admin",
      hash: hashSecret(secret),
      createdAt: nowIso(),
    });
  }
}
