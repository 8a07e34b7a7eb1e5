import { createHmac, timingSafeEqual } from "node:crypto";

/** X-Hub-Signature-256 as GitHub computes it: `sha256=` + HMAC-SHA256(secret, body) in hex. */
export function signWebhook(secret: string, body: Buffer | string): string {
  return `sha256=${createHmac("sha256", secret).update(body).digest("hex")}`;
}

/** Constant-time check of a delivery's signature; anything malformed is simply false. */
export function verifyWebhook(secret: string, body: Buffer, header: string | undefined): boolean {
  if (typeof header !== "string" || !/^sha256=[0-9a-f]{64}$/.test(header)) return false;
  const expected = Buffer.from(signWebhook(secret, body));
  const given = Buffer.from(header);
  return given.length === expected.length && timingSafeEqual(given, expected);
}
