import { readFile } from "node:fs/promises";
import { EgressFindings } from "@denv/spec";
import type { ContainerState, DockerClient } from "./docker/docker-client.js";
import type { Canary } from "./host/canary.js";
import { engineLeaksInternalDns, loopbackNameservers } from "./host/dns-leak.js";
import { hasRejectRule } from "./host/firewall.js";
import { routeExists, routes, tcpConnects } from "./host/netns.js";
import type { EnvironmentRecord } from "./records.js";
import { readContainerFile } from "./runtime/principals.js";

/**
 * The egress probe (protection 5). It inspects and never sends traffic off the machine: route
 * lookups (`ip route get` is a table lookup), IPv6 addresses, the resolver path (the service's
 * resolv.conf, read through the engine's archive API, and whether the engine's embedded DNS
 * leaks names from internal networks), the network's settings, the host firewall rule, and one
 * TCP connect to denvd's own canary through the environment's gateway.
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

export async function probeEgress(
  docker: DockerClient,
  canary: Canary,
  env: EnvironmentRecord,
): Promise<ProbeResult> {
  const started = Date.now();
  const findings: string[] = [];
  const net = await docker.networks.info(env.network.id);
  const internal = net?.internal ?? false;
  if (!internal) findings.push(EgressFindings.notInternal(env.network.name));
  const rejectRule = await hasRejectRule(env.network.id);
  canary.drain();

  const services: ServiceProbe[] = [];
  for (const svc of env.plan.services) {
    if (svc.networkMode === "none") continue;
    const id = env.containers[svc.name];
    const state = id ? await docker.containers.inspect(id) : undefined;
    if (!state?.running || state.pid <= 0) continue;
    const table = await routes(state.pid);
    const defaultRoute = table.some((r) => r.dst === "default");
    const routeOut = !defaultRoute && (await routeExists(state.pid, OUTSIDE_ADDRESS));
    const canaryReached = await tcpConnects(state.pid, env.network.gateway, canary.port);
    const resolv = await resolverConfig(docker, state);
    const nameservers = [...resolv.matchAll(/^nameserver\s+(\S+)/gm)].map((m) => m[1] as string);
    const ipv6 = await ipv6Addresses(state.pid);
    const networks = Object.keys(state.networks);
    if (defaultRoute) findings.push(EgressFindings.defaultRoute(svc.name));
    if (routeOut) findings.push(EgressFindings.routeOut(svc.name));
    if (canaryReached) findings.push(EgressFindings.hostReachable(svc.name));
    for (const address of ipv6) findings.push(EgressFindings.ipv6Address(svc.name, address));
    for (const ns of nameservers.filter((n) => n !== EMBEDDED_DNS)) {
      findings.push(EgressFindings.resolverOutside(svc.name, ns));
    }
    for (const other of networks.filter((n) => n !== env.network.name)) {
      findings.push(EgressFindings.extraNetwork(svc.name, other));
    }
    services.push({
      service: svc.name,
      routes: table.map(
        (r) => `${r.dst}${r.gateway ? ` via ${r.gateway}` : ""}${r.dev ? ` dev ${r.dev}` : ""}`,
      ),
      defaultRoute,
      routeOut,
      canaryReached,
      nameservers,
      ipv6,
      networks,
    });
  }
  // A connection the canary saw but the connect above did not report (e.g. a half-open) still counts.
  const hits = canary.drain();
  if (hits.length > 0 && !services.some((s) => s.canaryReached)) {
    findings.push(EgressFindings.hostReachable(env.plan.agent.service));
  }
  const resolver = await resolverPath(docker);
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
