import { randomBytes } from "node:crypto";
import { dockerLeftovers, startCanary } from "../../testing/double-fixtures.js";
import { PrimeServer } from "./prime-server.js";

/**
 * What a test of a Prime target starts: the Prime double with a fresh API key (sandboxes from
 * debian:bookworm-slim, never pulled, and the named `images`), and a canary listener on
 * 127.0.0.1 that counts who connected (what an egress probe must not reach).
 */
export interface PrimeDouble {
  server: PrimeServer;
  /** The client's connection options: `baseUrl` is the SDK's PRIME_API_BASE_URL + /api/v1. */
  connection: { apiKey: string; baseUrl: string };
  /** What the official Python SDK needs in its environment to call the double. */
  sdkEnv: { PRIME_API_KEY: string; PRIME_API_BASE_URL: string };
  canary: { host: string; port: number; hits(): number };
  /** The Docker objects the double made that are still there ("<kind> <id>"). */
  leftovers(): string[];
  close(): Promise<void>;
}

export async function startPrimeDouble(
  o: { images?: Record<string, string>; buildNetwork?: "none" | "default" } = {},
): Promise<PrimeDouble> {
  const apiKey = `pit_${randomBytes(20).toString("hex")}`;
  const server = new PrimeServer({
    apiKey,
    images: { "debian:bookworm-slim": "debian:bookworm-slim", ...o.images },
    ...(o.buildNetwork ? { buildNetwork: o.buildNetwork } : {}),
  });
  try {
    await server.start();
  } catch (e) {
    await server.close().catch(() => undefined);
    throw e;
  }
  const canary = await startCanary();
  const label = `ai.denv.prime.server=${server.id}`;
  return {
    server,
    connection: { apiKey, baseUrl: `${server.url}/api/v1` },
    sdkEnv: { PRIME_API_KEY: apiKey, PRIME_API_BASE_URL: server.url },
    canary: { host: canary.host, port: canary.port, hits: canary.hits },
    leftovers: () => dockerLeftovers(label),
    close: async () => {
      await canary.close();
      await server.close();
    },
  };
}
