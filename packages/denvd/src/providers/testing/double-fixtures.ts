import { execFileSync } from "node:child_process";
import { createServer } from "node:net";

/**
 * What every provider double hands its tests besides the server: a canary listener on 127.0.0.1
 * that counts who connected (what an egress probe must not reach), and the Docker objects the
 * double made that are still there.
 */
export interface Canary {
  host: string;
  port: number;
  hits(): number;
  close(): Promise<void>;
}

/**
 * A canary on `host` (default 127.0.0.1). On the gateway of a double's open network
 * (gatewayOf), it is what a sandbox would reach if its egress were open: from inside a container,
 * 127.0.0.1 is the container itself, so only such a canary proves a probe's "nothing reached".
 */
export async function startCanary(host = "127.0.0.1"): Promise<Canary> {
  let hits = 0;
  const listener = createServer((s) => {
    hits += 1;
    s.destroy();
  });
  await new Promise<void>((r) => listener.listen(0, host, r));
  return {
    host,
    port: (listener.address() as { port: number }).port,
    hits: () => hits,
    close: () => new Promise<void>((r) => listener.close(() => r())),
  };
}

/** The gateway address of a Docker network (a double's open network), as this host has it. */
export function gatewayOf(network: string): string {
  return execFileSync(
    "docker",
    ["network", "inspect", network, "--format", "{{(index .IPAM.Config 0).Gateway}}"],
    {
      encoding: "utf8",
    },
  ).trim();
}

/** The containers, networks and images carrying `label` (key=value), as "<kind> <id>". */
export function dockerLeftovers(label: string): string[] {
  const docker = (...args: string[]) => execFileSync("docker", args, { encoding: "utf8" }).trim();
  return ["ps -a", "network ls", "image ls -a"].flatMap((kind) =>
    docker(...kind.split(" "), "-q", "--filter", `label=${label}`)
      .split("\n")
      .filter(Boolean)
      .map((id) => `${kind.split(" ")[0]} ${id}`),
  );
}
