import { readFile } from "node:fs/promises";
import { EgressFindings } from "@denv/spec";
import type { DockerClient } from "./docker/docker-client.js";
import type { Canary } from "./host/canary.js";
import { hasRejectRule } from "./host/firewall.js";
import { routeExists, routes, tcpConnects } from "./host/netns.js";
import type { EnvironmentRecord } from "./records.js";

/**
 * The egress probe (protection 5). It inspects and never sends traffic off the machine: route
 * lookups (`ip route get` is a table lookup), the resolver configuration, the network's
 * settings, the host firewall rule, and one TCP connect to denvd's own canary through the
 * environment's gateway.
 */

/** TEST-NET-1 (RFC 5737): an address no route should cover; only looked up, never contacted. */
const OUTSIDE_ADDRESS = "192.0.2.1";

export interface ServiceProbe {
  service: string;
  routes: string[];
  defaultRoute: boolean;
  routeOut: boolean;
  canaryReached: boolean;
  nameservers: string[];
  networks: string[];
}

export interface ProbeResult {
  ok: boolean;
  findings: string[];
  network: { name: string; internal: boolean; rejectRule: boolean };
  services: ServiceProbe[];
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
    const resolv = await readFile(`/proc/${state.pid}/root/etc/resolv.conf`, "utf8").catch(() => "");
    const nameservers = [...resolv.matchAll(/^nameserver\s+(\S+)/gm)].map((m) => m[1] as string);
    const networks = Object.keys(state.networks);
    if (defaultRoute) findings.push(EgressFindings.defaultRoute(svc.name));
    if (routeOut) findings.push(EgressFindings.routeOut(svc.name));
    if (canaryReached) findings.push(EgressFindings.hostReachable(svc.name));
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
      networks,
    });
  }
  // A connection the canary saw but the connect above did not report (e.g. a half-open) still counts.
  const hits = canary.drain();
  if (hits.length > 0 && !services.some((s) => s.canaryReached)) {
    findings.push(EgressFindings.hostReachable(env.plan.agent.service));
  }
  return {
    ok: findings.length === 0,
    findings,
    network: { name: env.network.name, internal, rejectRule },
    services,
    durationMs: Date.now() - started,
  };
}
