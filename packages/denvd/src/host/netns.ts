import { run } from "./run.js";

/**
 * Operations inside a container's network namespace, run from the host with nsenter -n (only
 * the network namespace is entered: the host's `ip` and `bash` are used, no tool is needed in
 * the image).
 */

interface Route {
  dst: string;
  gateway?: string;
  dev?: string;
}

export async function routes(pid: number): Promise<Route[]> {
  const r = await run("nsenter", ["-t", String(pid), "-n", "ip", "-j", "route", "show"]);
  if (r.code !== 0) throw new Error(`cannot read routes of pid ${pid}: ${r.stderr.trim()}`);
  return JSON.parse(r.stdout || "[]") as Route[];
}

export async function removeDefaultRoute(pid: number): Promise<void> {
  for (const route of await routes(pid)) {
    if (route.dst === "default") {
      await run("nsenter", ["-t", String(pid), "-n", "ip", "route", "del", "default"]);
    }
  }
}

/**
 * Whether the kernel would route a packet to `addr`. `ip route get` is a lookup in the routing
 * table: it sends nothing.
 */
export async function routeExists(pid: number, addr: string): Promise<boolean> {
  const r = await run("nsenter", ["-t", String(pid), "-n", "ip", "route", "get", addr]);
  return r.code === 0;
}

/**
 * Tries a TCP connect from inside the namespace to host:port (only ever a listener denv runs:
 * its canary). Returns true when the connection was established.
 */
export async function tcpConnects(
  pid: number,
  host: string,
  port: number,
  timeoutMs = 2000,
): Promise<boolean> {
  const r = await run(
    "nsenter",
    ["-t", String(pid), "-n", "bash", "-c", `exec 3<>/dev/tcp/${host}/${port} && echo connected`],
    { timeoutMs },
  );
  return r.code === 0 && r.stdout.includes("connected");
}
