import { randomBytes } from "node:crypto";
import { dockerLeftovers, startCanary } from "../../testing/double-fixtures.js";
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

export async function startModalDouble(
  o: { images?: Record<string, string>; buildNetwork?: "none" | "default" } = {},
): Promise<ModalDouble> {
  const tokenId = `ak-${randomBytes(10).toString("hex")}`;
  const tokenSecret = `as-${randomBytes(10).toString("hex")}`;
  const server = new ModalServer({
    tokenId,
    tokenSecret,
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
  const label = `ai.denv.modal.server=${server.id}`;
  return {
    server,
    connection: { tokenId, tokenSecret },
    sdkEnv: { MODAL_SERVER_URL: server.url, MODAL_TOKEN_ID: tokenId, MODAL_TOKEN_SECRET: tokenSecret },
    canary: { host: canary.host, port: canary.port, hits: canary.hits },
    leftovers: () => dockerLeftovers(label),
    close: async () => {
      await canary.close();
      await server.close();
    },
  };
}
