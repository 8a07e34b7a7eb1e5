import { createServer, type Server, type Socket } from "node:net";

/**
 * A TCP listener of denvd's own on every host address, IPv4 and IPv6. An environment that can reach it can
 * reach the host: the egress probe connects to it through the environment's gateway, and
 * counts the connections it received as evidence.
 */
export class Canary {
  private server: Server | undefined;
  private hits: string[] = [];
  port = 0;

  async listen(port = 0): Promise<number> {
    this.server = createServer((sock: Socket) => {
      this.hits.push(sock.remoteAddress ?? "?");
      sock.destroy();
    });
    await new Promise<void>((resolve, reject) => {
      this.server?.once("error", reject);
      // Every host address, IPv4 and IPv6 (dual stack): an environment reaching either is a finding.
      this.server?.listen({ port, host: "::", ipv6Only: false }, () => resolve());
    });
    const addr = this.server.address();
    this.port = typeof addr === "object" && addr ? addr.port : port;
    return this.port;
  }

  /** Sources that connected since the last call. */
  drain(): string[] {
    const h = this.hits;
    this.hits = [];
    return h;
  }

  async close(): Promise<void> {
    await new Promise<void>((resolve) => (this.server ? this.server.close(() => resolve()) : resolve()));
  }
}
