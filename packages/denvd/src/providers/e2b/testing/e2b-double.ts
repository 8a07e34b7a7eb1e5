import { randomBytes } from "node:crypto";
import { dockerLeftovers, startCanary } from "../../testing/double-fixtures.js";
import { E2bServer } from "./e2b-server.js";

/**
 * What a test of the E2B runtime starts: the E2B double with a fresh API key (sandboxes from
 * debian:bookworm-slim, never pulled, and the named `templates`), and a canary listener on
 * 127.0.0.1 that counts who connected (what the egress probe must not reach).
 */
export interface E2bDouble {
  server: E2bServer;
  /** The SDK's connection options for the double. */
  connection: { apiKey: string; apiUrl: string; sandboxUrl: string };
  canary: { host: string; port: number; hits(): number };
  /** The Docker objects the double made that are still there ("<kind> <id>"). */
  leftovers(): string[];
  close(): Promise<void>;
}

export async function startE2bDouble(o: { templates?: Record<string, string> } = {}): Promise<E2bDouble> {
  const apiKey = `e2b_${randomBytes(20).toString("hex")}`;
  const server = await new E2bServer({
    apiKey,
    templates: o.templates ?? {},
    baseImages: { "debian:bookworm-slim": "debian:bookworm-slim" },
  }).start();
  const canary = await startCanary();
  const label = `ai.denv.e2b.server=${server.id}`;
  return {
    server,
    connection: { apiKey, apiUrl: server.apiUrl, sandboxUrl: server.sandboxUrl },
    canary: { host: canary.host, port: canary.port, hits: canary.hits },
    leftovers: () => dockerLeftovers(label),
    close: async () => {
      await canary.close();
      await server.close();
    },
  };
}
