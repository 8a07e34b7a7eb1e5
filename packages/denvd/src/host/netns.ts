import { readFile, readlink } from "node:fs/promises";
import { run } from "./run.js";

/**
 * Operations inside a container's network namespace, run from the host: reads of the kernel's
 * view of it through procfs (`/proc/PID/net/*` shows the namespace of PID), and nsenter -n
 * where something must run in it (only the network namespace is entered: the host's `ip` and
 * `bash` are used, no tool is needed in the image).
 */

export interface Route {
  dst: string;
  gateway?: string;
  dev?: string;
}

/**
 * The IPv4 routes of the namespace's main table (what `ip route show` prints), read from
 * `/proc/PID/net/route` without starting a process.
 */
export async function routes(pid: number): Promise<Route[]> {
  let table: string;
  try {
    table = await readFile(`/proc/${pid}/net/route`, "utf8");
  } catch (err) {
    throw new Error(`cannot read routes of pid ${pid}: ${(err as Error).message}`);
  }
  return parseRouteTable(table);
}

/** `/proc/net/route`: one line per route, addresses as little-endian hex words. */
export function parseRouteTable(table: string): Route[] {
  const out: Route[] = [];
  for (const line of table.split("\n").slice(1)) {
    const [dev, dst, gateway, flags, , , , mask] = line.trim().split(/\s+/);
    if (dev === undefined || dst === undefined || mask === undefined || gateway === undefined) continue;
    const bits = prefixLength(mask);
    const route: Route = { dst: bits === 0 ? "default" : `${ipv4(dst)}/${bits}`, dev };
    // RTF_GATEWAY: the route goes through a router.
    if ((Number.parseInt(flags ?? "0", 16) & 0x2) !== 0) route.gateway = ipv4(gateway);
    out.push(route);
  }
  return out;
}

function ipv4(hex: string): string {
  const n = Number.parseInt(hex, 16);
  return [n & 0xff, (n >>> 8) & 0xff, (n >>> 16) & 0xff, n >>> 24].join(".");
}

function prefixLength(hex: string): number {
  let n = Number.parseInt(hex, 16) >>> 0;
  let bits = 0;
  for (; n !== 0; n >>>= 1) bits += n & 1;
  return bits;
}

/** What became of a namespace's default route. */
export type RouteRemoval = "removed" | "absent" | "exited";

/**
 * Takes the default route out of the network namespace of `pid`. A process that exits while
 * this runs (a one-shot service, before the engine has noticed) took its namespace with it:
 * that is "exited", not an error. A deletion that fails is an error only if a default route is
 * still there afterwards: the restart watch removes the same route when the engine reports the
 * start, and the second deletion then finds none ("No such process").
 */
export async function removeDefaultRoute(pid: number): Promise<RouteRemoval> {
  try {
    let removed = false;
    for (const route of await routes(pid)) {
      if (route.dst !== "default") continue;
      const r = await run("nsenter", ["-t", String(pid), "-n", "ip", "route", "del", "default"]);
      if (r.code !== 0 && (await routes(pid)).some((x) => x.dst === "default")) {
        throw new Error(`cannot remove the default route of pid ${pid}: ${r.stderr.trim()}`);
      }
      removed = true;
    }
    return removed ? "removed" : "absent";
  } catch (err) {
    if (!(await hasNetworkNamespace(pid))) return "exited";
    throw err;
  }
}

/** Whether `pid` is a live process with a network namespace (a zombie or a gone pid has none). */
export async function hasNetworkNamespace(pid: number): Promise<boolean> {
  try {
    await readlink(`/proc/${pid}/ns/net`);
    return true;
  } catch {
    return false;
  }
}

/** How the kernel would route a packet to one address (`ip route get`), or null: no route. */
export interface RouteLookup {
  dev?: string;
  /** The router it would go through; absent for an address on a directly connected network. */
  gateway?: string;
}

export interface NamespaceLookups {
  /** One entry per address asked, in order. */
  lookups: Array<RouteLookup | null>;
  /** Whether the TCP connect was established (false when none was asked). */
  connected: boolean;
}

/**
 * Route lookups of `addresses` in the namespace of `pid` (`ip route get` is a lookup in the
 * routing table and policy rules: it sends nothing) and, when `connect` is given, a TCP connect to
 * it (only ever a listener denv runs: its canary), the two at once: one `ip` answering every
 * lookup, one `bash` for the connect, each entered into the namespace by its own nsenter. A
 * connect that hangs (it cannot while the host rejects the bridge's traffic) is given up after
 * `timeoutMs`; lookups that did not all answer are an error, never "no route".
 */
export async function lookupAndConnect(
  pid: number,
  addresses: string[],
  connect?: { host: string; port: number },
  timeoutMs = 5000,
): Promise<NamespaceLookups> {
  const [lookups, connected] = await Promise.all([
    routeLookups(pid, addresses),
    connect === undefined ? false : connectFrom(pid, connect, timeoutMs),
  ]);
  return { lookups, connected };
}

/**
 * `ip route get` of each address, in one `ip -batch`: each answer is a JSON line naming its
 * address (`dst`), each refusal ("Network is unreachable": no route) an RTNETLINK line on stderr.
 * Anything else (the namespace gone, an answer missing) is an error.
 */
async function routeLookups(pid: number, addresses: string[]): Promise<Array<RouteLookup | null>> {
  if (addresses.length === 0) return [];
  // Addresses travel as ip's batch input, never as a shell's text; only literal IPv4 addresses.
  for (const a of addresses) {
    if (!/^\d{1,3}(\.\d{1,3}){3}$/.test(a)) throw new Error(`not an IPv4 address: ${JSON.stringify(a)}`);
  }
  const r = await run("nsenter", ["-t", String(pid), "-n", "ip", "-j", "-force", "-batch", "-"], {
    input: addresses.map((a) => `route get ${a}\n`).join(""),
  });
  const found = new Map<string, RouteLookup>();
  for (const line of r.stdout.split("\n")) {
    if (line.trim() === "") continue;
    for (const route of JSON.parse(line) as Array<{ dst?: string; dev?: string; gateway?: string }>) {
      if (route.dst === undefined) continue;
      found.set(route.dst, {
        ...(route.dev ? { dev: route.dev } : {}),
        ...(route.gateway ? { gateway: route.gateway } : {}),
      });
    }
  }
  const refused = r.stderr.split("\n").filter((l) => l.startsWith("RTNETLINK answers:")).length;
  const answered = addresses.filter((a) => found.has(a)).length;
  if ((r.code !== 0 && r.code !== 1) || answered + refused !== addresses.length) {
    throw new Error(`route lookups in the namespace of pid ${pid} did not answer: ${r.stderr.trim()}`);
  }
  return addresses.map((a) => found.get(a) ?? null);
}

/** A TCP connect to `to` from inside the namespace of `pid`: established or not. */
async function connectFrom(
  pid: number,
  to: { host: string; port: number },
  timeoutMs: number,
): Promise<boolean> {
  // The target travels as an argument, never as script text.
  const script = 'exec 3<>"/dev/tcp/$1" && echo connected';
  const r = await run(
    "nsenter",
    ["-t", String(pid), "-n", "bash", "-c", script, "bash", `${to.host}/${to.port}`],
    {
      timeoutMs,
    },
  );
  return r.stdout.trim() === "connected";
}
