import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { createServer, type Server } from "node:net";
import { ModalServer } from "./modal-server.js";

/**
 * What a test of a Modal target starts: the Modal double with a fresh token (sandboxes from
 * debian:bookworm-slim, never pulled, and the named `images`), and a canary listener on 127.0.0.1
 * that counts who connected (what an egress probe must not reach).
 */
export interface ModalDouble {
  server: ModalServer;
  /** The SDK's connection settings: `new ModalClient(double.connection)` with MODAL_SERVER_URL. */
  connection: { tokenId: string; tokenSecret: string };
  /** What the SDK needs in its environment to call the double (it reads the URL only from there). */
  sdkEnv: { MODAL_SERVER_URL: string; MODAL_TOKEN_ID: string; MODAL_TOKEN_SECRET: string };
  canary: { host: string; port: number; hits(): number };
  /** The Docker objects the double made that are still there ("<kind> <id>"). */
  leftovers(): string[];
  close(): Promise<void>;
}

export async function startModalDouble(o: { images?: Record<string, string> } = {}): Promise<ModalDouble> {
  const tokenId = `ak-${randomBytes(10).toString("hex")}`;
  const tokenSecret = `as-${randomBytes(10).toString("hex")}`;
  const server = new ModalServer({
    tokenId,
    tokenSecret,
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
  const label = `label=ai.denv.modal.server=${server.id}`;
  const docker = (...args: string[]) => execFileSync("docker", args, { encoding: "utf8" }).trim();
  return {
    server,
    connection: { tokenId, tokenSecret },
    sdkEnv: { MODAL_SERVER_URL: server.url, MODAL_TOKEN_ID: tokenId, MODAL_TOKEN_SECRET: tokenSecret },
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
