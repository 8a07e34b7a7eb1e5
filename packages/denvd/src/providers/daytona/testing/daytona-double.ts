import { randomBytes } from "node:crypto";
import { dockerLeftovers } from "../../testing/double-fixtures.js";
import { DaytonaServer } from "./daytona-server.js";

/**
 * What a test of the Daytona runtime starts: the Daytona double (with moto for its object
 * storage) and a fresh API key. `url` is the SDK's `apiUrl`.
 */
export interface DaytonaDouble {
  server: DaytonaServer;
  /** The SDK's `apiUrl` (…/api). */
  url: string;
  apiKey: string;
  /** The SDK's configuration for the double: `new Daytona(double.config)`. */
  config: { apiKey: string; apiUrl: string; target: string };
  /** The host address of the sandboxes' bridge network (a listener there is "the outside"). */
  gateway: string;
  /** Sandboxes that exist (not deleted), whatever their state. */
  liveSandboxes(): number;
  /** Every request served, as "METHOD /path". */
  requests(): readonly string[];
  /** The Docker objects of the double that are still there ("<kind> <id>"). */
  leftovers(): string[];
  close(): Promise<void>;
}

export async function startDaytonaDouble(): Promise<DaytonaDouble> {
  const apiKey = `dtn_${randomBytes(20).toString("hex")}`;
  const server = new DaytonaServer(apiKey);
  try {
    await server.start();
  } catch (e) {
    await server.close().catch(() => undefined);
    throw e;
  }
  const label = `ai.denv.daytona.server=${server.id}`;
  const url = `${server.url}/api`;
  return {
    server,
    url,
    apiKey,
    config: { apiKey, apiUrl: url, target: "local" },
    gateway: server.gateway,
    liveSandboxes: () => server.sandboxes.all.size,
    requests: () => server.requests,
    leftovers: () => dockerLeftovers(label),
    close: () => server.close(),
  };
}
