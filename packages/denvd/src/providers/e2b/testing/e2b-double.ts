import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { createServer, type Server } from "node:net";
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
  let hits = 0;
  const listener: Server = createServer((s) => {
    hits += 1;
    s.destroy();
  });
  await new Promise<void>((r) => listener.listen(0, "127.0.0.1", r));
  const label = `label=ai.denv.e2b.server=${server.id}`;
  const docker = (...args: string[]) => execFileSync("docker", args, { encoding: "utf8" }).trim();
  return {
    server,
    connection: { apiKey, apiUrl: server.apiUrl, sandboxUrl: server.sandboxUrl },
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
