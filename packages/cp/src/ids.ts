import { createHash, randomBytes } from "node:crypto";

/** Ids of rows: a readable prefix plus 10 random base32-ish characters. */
export function newId(prefix: string): string {
  return `${prefix}_${randomToken(8)}`;
}

/** URL-safe random text with `bytes` bytes of entropy, lowercase so it fits names too. */
export function randomToken(bytes: number): string {
  return randomBytes(bytes).toString("base64url").toLowerCase().replace(/[-_]/g, "x");
}

/**
 * Secrets (API tokens, join tokens, host credentials) are stored as sha256 only. They carry
 * 256 bits of entropy, so a plain hash is enough; a slow KDF would only slow every request.
 */
export function hashSecret(secret: string): string {
  return createHash("sha256").update(secret).digest("hex");
}

export const SecretPrefix = { api: "denv_", join: "denvj_", host: "denvh_" } as const;

export function newSecret(prefix: string): string {
  return `${prefix}${randomBytes(32).toString("base64url")}`;
}

export function nowIso(): string {
  return new Date().toISOString();
}
