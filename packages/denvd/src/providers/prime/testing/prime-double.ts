import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { createServer, type Server } from "node:net";
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

export async function startPrimeDouble(o: { images?: Record<string, string> } = {}): Promise<PrimeDouble> {
  const apiKey = `pit_${randomBytes(20).toString("hex")}`;
  const server = new PrimeServer({
    apiKey,
    images: { "debian:bookworm-slim": "debian:bookworm-slim", ...o.images },
  });
  try {
    await server.start();
  } catch (e) {
    await server.close().catch(() => undefined);
    throw e;
  }
  let hits = 0;
  const listener: Server = createServer((s) => {
    hits += 1;
    s.destroy();
  });
  await new Promise<void>((r) => listener.listen(0, "127.0.0.1", r));
  const label = `label=ai.denv.prime.server=${server.id}`;
  const docker = (...args: string[]) => execFileSync("docker", args, { encoding: "utf8" }).trim();
  return {
    server,
    connection: { apiKey, baseUrl: `${server.url}/api/v1` },
    sdkEnv: { PRIME_API_KEY: apiKey, PRIME_API_BASE_URL: server.url },
    canary: { host: "127.0.0.1", port: (listener.address() as { port: number }).port, hits: () => hits },
    leftovers: () =>
      ["ps -a", "network ls", "image ls -a"].flatMap((kind) =>
        docker(...kind.split(" "), "-q", "--filter", label)
          .split("\n")
          .filter(Boolean)
          .map((id) => `${kind.split(" ")[0]} ${id}`),
      ),
    close: async () => {
      await new Promise<void>((r) => listener.close(() => r()));
      await server.close();
    },
  };
}
