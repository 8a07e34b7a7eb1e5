import { DenvError } from "@denv/spec/errors";

/** The HTTP status dockerode attached to an engine error, if any. */
export function statusOf(err: unknown): number | undefined {
  return (err as { statusCode?: number }).statusCode;
}

/** An engine error as a DenvError naming what was being done. */
export function engineError(err: unknown, what: string): DenvError {
  if (err instanceof DenvError) return err;
  const e = err as { json?: { message?: string }; message?: string };
  const msg = e.json?.message ?? e.message ?? String(err);
  const status = statusOf(err);
  if (status === 404) return new DenvError("not_found", `${what}: ${msg}`);
  if (status === 409) return new DenvError("conflict", `${what}: ${msg}`);
  return new DenvError("docker", `${what}: ${msg}`);
}

/** Label selectors in the engine's filter syntax. */
export function labelFilter(labels: Record<string, string>): string[] {
  return Object.entries(labels).map(([k, v]) => `${k}=${v}`);
}

/** Splits Docker's multiplexed stream format (8-byte headers) held whole in a buffer. */
export function demuxBuffer(raw: Buffer): { stdout: Buffer; stderr: Buffer } {
  const out: Buffer[] = [];
  const err: Buffer[] = [];
  let i = 0;
  while (i + 8 <= raw.length) {
    const kind = raw[i];
    const len = raw.readUInt32BE(i + 4);
    const chunk = raw.subarray(i + 8, i + 8 + len);
    (kind === 2 ? err : out).push(chunk);
    i += 8 + len;
  }
  return { stdout: Buffer.concat(out), stderr: Buffer.concat(err) };
}
