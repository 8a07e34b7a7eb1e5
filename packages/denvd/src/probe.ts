import { readFile } from "node:fs/promises";
import { EgressFindings } from "@denv/spec";
import type { ContainerState, DockerClient } from "./docker/docker-client.js";
import type { Canary } from "./host/canary.js";
import { engineLeaksInternalDns, loopbackNameservers } from "./host/dns-leak.js";
import { hasRejectRule } from "./host/firewall.js";
import { hasNetworkNamespace, lookupAndConnect, type Route, type RouteLookup, routes } from "./host/netns.js";
import type { EnvironmentRecord } from "./records.js";
import { readContainerFile } from "./runtime/principals.js";

/**
 * The egress probe (protection 5). It inspects and never sends traffic off the machine: the
 * network's settings and the host firewall rule, and per service its routing table (procfs),
 * route lookups for an outside address and for the gateway (`ip route get` is a table lookup),
 * IPv6 addresses, the resolver path (the service's resolv.conf, read through the engine's
 * archive API, and whether the engine's embedded DNS leaks names from internal networks), the
 * networks it is attached to; then TCP connects to denvd's own canary through the environment's
 * gateway, one per distinct path to the gateway (below). Everything that does not depend on
 * another answer runs at once.
 */

/** Docker's embedded DNS server, the only resolver a service of an environment network may use. */
const EMBEDDED_DNS = "127.0.0.11";

/** TEST-NET-1 (RFC 5737): an address no route should cover; only looked up, never contacted. */
const OUTSIDE_ADDRESS = "192.0.2.1";

export interface ServiceProbe {
  service: string;
  routes: string[];
  defaultRoute: boolean;
  routeOut: boolean;
  canaryReached: boolean;
  /**
   * The service whose connect to the canary stands for this one: itself, or a service with the
   * same path to the gateway (see `gatewayPath`).
   */
  canaryFrom: string;
  nameservers: string[];
  /** IPv6 addresses other than loopback (there should be none). */
  ipv6: string[];
  networks: string[];
}

/** Where names asked inside the environment go. */
export interface ResolverPath {
  engine: string;
  /** The engine forwards names from internal networks through the host's loopback resolver. */
  embeddedDnsLeaks: boolean;
  loopbackUpstream: string[];
}

export interface ProbeResult {
  ok: boolean;
  findings: string[];
  network: { name: string; internal: boolean; rejectRule: boolean };
  services: ServiceProbe[];
  resolver: ResolverPath;
  durationMs: number;
}

/**
 * What decides whether a packet from a service's namespace to the canary is rejected: the host
 * rejects new connections arriving from the environment's bridge, whatever their source, so a
 * service reaches the host exactly when its packets to the gateway leave through that bridge
 * unrejected. Services attached to the same networks (the environment's alone, else a finding)
 * whose kernel routes the gateway the same way (same interface, no router) send them the same
 * way: one connect answers for all of them. No service can change its routes or rules: none has
 * CAP_NET_ADMIN (cap_add is refused). A service on any other path connects itself.
 */
function gatewayPath(lookup: RouteLookup | null, networks: string[]): string {
  return JSON.stringify([lookup?.dev ?? null, lookup?.gateway ?? null, [...networks].sort()]);
}

interface Inspected {
  service: string;
  pid: number;
  table: Route[];
  defaultRoute: boolean;
  routeOut: boolean;
  path: string;
  /** The connect made with the lookups (the representative's), else undefined. */
  connected: boolean | undefined;
  nameservers: string[];
  ipv6: string[];
  networks: string[];
}

export async function probeEgress(
  docker: DockerClient,
  canary: Canary,
  env: EnvironmentRecord,
): Promise<ProbeResult> {
  const started = Date.now();
  const findings: string[] = [];
  canary.drain();
  const target = { host: env.network.gateway, port: canary.port };
  const probed = env.plan.services.filter((svc) => svc.networkMode !== "none").map((svc) => svc.name);
  // The agent's own connect stands for the services on its path (any service when it has no network).
  const representative = probed.includes(env.plan.agent.service) ? env.plan.agent.service : probed[0];

  const inspect = async (service: string): Promise<Inspected | undefined> => {
    const id = env.containers[service];
    const state = id ? await docker.containers.inspect(id) : undefined;
    if (!state?.running || state.pid <= 0) return undefined;
    // A service that exited after the inspect (a one-shot) took its namespace with it: nothing
    // of it can reach anywhere, as for one seen stopped. A live one that cannot be read fails.
    const read = await Promise.all([
      routes(state.pid),
      lookupAndConnect(
        state.pid,
        [OUTSIDE_ADDRESS, env.network.gateway],
        service === representative ? target : undefined,
      ),
      resolverConfig(docker, state),
      ipv6Addresses(state.pid),
    ]).catch(async (err: unknown) => {
      if (await hasNetworkNamespace(state.pid)) throw err;
      return undefined;
    });
    if (!read) return undefined;
    const [table, found, resolv, ipv6] = read;
    const networks = Object.keys(state.networks);
    const defaultRoute = table.some((r) => r.dst === "default");
    return {
      service,
      pid: state.pid,
      table,
      defaultRoute,
      routeOut: !defaultRoute && found.lookups[0] !== null,
      path: gatewayPath(found.lookups[1] ?? null, networks),
      connected: service === representative ? found.connected : undefined,
      nameservers: [...resolv.matchAll(/^nameserver\s+(\S+)/gm)].map((m) => m[1] as string),
      ipv6,
      networks,
    };
  };
  const [net, rejectRule, resolver, inspected] = await Promise.all([
    docker.networks.info(env.network.id),
    hasRejectRule(env.network.id),
    resolverPath(docker),
    Promise.all(probed.map(inspect)),
  ]);
  const internal = net?.internal ?? false;
  if (!internal) findings.push(EgressFindings.notInternal(env.network.name));
  const running = inspected.filter((s): s is Inspected => s !== undefined);

  // A path the representative's connect did not cover gets one of its own, from its first service.
  const reached = new Map<string, { from: string; reached: boolean }>();
  for (const s of running) {
    if (s.connected !== undefined) reached.set(s.path, { from: s.service, reached: s.connected });
  }
  const uncovered = new Map<string, Inspected>();
  for (const s of running) if (!reached.has(s.path) && !uncovered.has(s.path)) uncovered.set(s.path, s);
  await Promise.all(
    [...uncovered.values()].map(async (s) => {
      s.connected = (await lookupAndConnect(s.pid, [], target)).connected;
      reached.set(s.path, { from: s.service, reached: s.connected });
    }),
  );

  const services: ServiceProbe[] = running.map((s) => {
    const canary =
      s.connected !== undefined ? { from: s.service, reached: s.connected } : reached.get(s.path);
    const canaryReached = canary?.reached ?? false;
    if (s.defaultRoute) findings.push(EgressFindings.defaultRoute(s.service));
    if (s.routeOut) findings.push(EgressFindings.routeOut(s.service));
    // On a shared path the representative's packets are this service's: the finding is its own too.
    if (canaryReached) findings.push(EgressFindings.hostReachable(s.service));
    for (const address of s.ipv6) findings.push(EgressFindings.ipv6Address(s.service, address));
    for (const ns of s.nameservers.filter((n) => n !== EMBEDDED_DNS)) {
      findings.push(EgressFindings.resolverOutside(s.service, ns));
    }
    for (const other of s.networks.filter((n) => n !== env.network.name)) {
      findings.push(EgressFindings.extraNetwork(s.service, other));
    }
    return {
      service: s.service,
      routes: s.table.map(
        (r) => `${r.dst}${r.gateway ? ` via ${r.gateway}` : ""}${r.dev ? ` dev ${r.dev}` : ""}`,
      ),
      defaultRoute: s.defaultRoute,
      routeOut: s.routeOut,
      canaryReached,
      canaryFrom: canary?.from ?? s.service,
      nameservers: s.nameservers,
      ipv6: s.ipv6,
      networks: s.networks,
    };
  });
  // A connection the canary saw but the connect above did not report (e.g. a half-open) still counts.
  const hits = canary.drain();
  if (hits.length > 0 && !services.some((s) => s.canaryReached)) {
    findings.push(EgressFindings.hostReachable(env.plan.agent.service));
  }
  if (resolver.embeddedDnsLeaks && services.some((s) => s.nameservers.includes(EMBEDDED_DNS))) {
    findings.push(EgressFindings.dnsLeak(resolver.engine));
  }
  return {
    ok: findings.length === 0,
    findings,
    network: { name: env.network.name, internal, rejectRule },
    services,
    resolver,
    durationMs: Date.now() - started,
  };
}

async function resolverPath(docker: DockerClient): Promise<ResolverPath> {
  const engine = (await docker.version()).version;
  const loopbackUpstream = await loopbackNameservers();
  return {
    engine,
    embeddedDnsLeaks: engineLeaksInternalDns(engine) && loopbackUpstream.length > 0,
    loopbackUpstream,
  };
}

/** Non-loopback IPv6 addresses of a process's network namespace (the kernel's view, from procfs). */
async function ipv6Addresses(pid: number): Promise<string[]> {
  const table = await readFile(`/proc/${pid}/net/if_inet6`, "utf8").catch(() => "");
  return table
    .split("\n")
    .map((line) => line.trim().split(/\s+/))
    .filter((f) => f.length >= 6 && f[5] !== "lo")
    .map((f) => `${(f[0] ?? "").replace(/(.{4})(?!$)/g, "$1:")}%${f[5]}`);
}

/**
 * A service's resolver configuration: the file the engine generated and bind-mounts at
 * /etc/resolv.conf (a path of the engine's, never one the container chose), else the
 * container's own file through the archive API (which resolves it inside the container).
 */
async function resolverConfig(docker: DockerClient, state: ContainerState): Promise<string> {
  if (state.resolvConfPath) {
    const text = await readFile(state.resolvConfPath, "utf8").catch(() => undefined);
    if (text !== undefined) return text;
  }
  return (await readContainerFile(docker, state.id, "/etc/resolv.conf"))?.toString("utf8") ?? "";
}
