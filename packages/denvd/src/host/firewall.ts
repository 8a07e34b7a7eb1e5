import { existsSync } from "node:fs";
import { run } from "./run.js";

/**
 * Environment -> host traffic is rejected on the host's INPUT chain, per environment bridge, for
 * IPv4 and (where the host has IPv6) IPv6 alike. REJECT (not DROP) so that a connect attempt
 * fails at once and a probe is fast. Rules carry a comment with the network id so that gc can
 * find the ones whose network is gone.
 */

export function bridgeName(networkId: string): string {
  return `br-${networkId.slice(0, 12)}`;
}

type Family = { tool: "iptables" | "ip6tables"; unreachable: string };

const IPV4: Family = { tool: "iptables", unreachable: "icmp-port-unreachable" };
const IPV6: Family = { tool: "ip6tables", unreachable: "icmp6-port-unreachable" };

/** The families this host routes: IPv6 only where the kernel has it (and the tool is there). */
function families(): Family[] {
  return existsSync("/proc/net/if_inet6") ? [IPV4, IPV6] : [IPV4];
}

/**
 * New connections from the environment to the host are rejected: TCP with a reset (instant, and
 * not subject to the kernel's ICMP rate limit), the rest with an ICMP error.
 */
function ruleSpecs(networkId: string, family: Family): string[][] {
  const head = ["INPUT", "-i", bridgeName(networkId)];
  const tag = ["-m", "comment", "--comment", `denv:${networkId.slice(0, 12)}`];
  return [
    // Replies to connections the host opened (denvd's port tunnels) come back in on the bridge.
    // The states in the order `iptables -S` lists them (hasRejectRule finds the rule as listed).
    [...head, "-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED", ...tag, "-j", "ACCEPT"],
    [...head, "-p", "tcp", ...tag, "-j", "REJECT", "--reject-with", "tcp-reset"],
    [...head, ...tag, "-j", "REJECT", "--reject-with", family.unreachable],
  ];
}

export async function rejectToHost(networkId: string): Promise<void> {
  // The families in parallel (separate tables); within one, in order. Both finish before a
  // failure is reported, so that removing the rules afterwards removes all of them.
  const added = await Promise.allSettled(
    families().map(async (family) => {
      // Inserted in reverse so that the rules keep their order at the top of the chain.
      for (const spec of ruleSpecs(networkId, family).reverse()) {
        if ((await run(family.tool, ["-w", "-C", ...spec])).code === 0) continue;
        const r = await run(family.tool, ["-w", "-I", ...spec]);
        if (r.code !== 0) {
          throw new Error(
            `${family.tool}: cannot add the reject rule for ${bridgeName(networkId)}: ${r.stderr.trim()}`,
          );
        }
      }
    }),
  );
  for (const r of added) if (r.status === "rejected") throw r.reason;
}

export async function hasRejectRule(networkId: string): Promise<boolean> {
  // One listing of the chain per family, the rules looked up in it: a `-C` per rule is a process
  // and a read of the whole ruleset each (most of a claim's probe). A rule not found as listed
  // (absent, or an iptables that prints it otherwise) is asked of the kernel with `-C`, so the
  // answer stays the kernel's.
  const present = await Promise.all(
    families().map(async (family) => {
      const specs = ruleSpecs(networkId, family);
      const listed = await run(family.tool, ["-w", "-S", "INPUT"]);
      const lines = new Set(listed.code === 0 ? listed.stdout.split("\n").map((l) => l.trim()) : []);
      const unlisted = specs.filter((spec) => !lines.has(listedForm(spec)));
      const checks = await Promise.all(unlisted.map((spec) => run(family.tool, ["-w", "-C", ...spec])));
      return checks.every((r) => r.code === 0);
    }),
  );
  return present.every(Boolean);
}

/** A rule as `iptables -S` prints it (the comment quoted). */
function listedForm(spec: string[]): string {
  return ["-A", ...spec.map((arg) => (arg.startsWith("denv:") ? `"${arg}"` : arg))].join(" ");
}

export async function removeRejectRule(networkId: string): Promise<void> {
  for (const family of families()) {
    for (const spec of ruleSpecs(networkId, family)) {
      // Loop: an interrupted run may have inserted a rule twice.
      for (let i = 0; i < 5; i++) {
        if ((await run(family.tool, ["-w", "-D", ...spec])).code !== 0) break;
      }
    }
  }
}

/** Network ids (12 chars) of every denv rule present, IPv4 or IPv6, for gc. */
export async function ruleNetworkIds(): Promise<string[]> {
  const ids = new Set<string>();
  for (const family of families()) {
    const r = await run(family.tool, ["-w", "-S", "INPUT"]);
    if (r.code !== 0) continue;
    for (const m of r.stdout.matchAll(/--comment "?denv:([0-9a-f]{12})"?/g)) ids.add(m[1] as string);
  }
  return [...ids];
}

/** Lets an environment's network reach one host port on its gateway (a build's mirror proxy). */
function allowSpec(networkId: string, gateway: string, port: number): string[] {
  return [
    "INPUT",
    "-i",
    bridgeName(networkId),
    "-d",
    gateway,
    "-p",
    "tcp",
    "--dport",
    String(port),
    "-m",
    "comment",
    "--comment",
    `denv:${networkId.slice(0, 12)}`,
    "-j",
    "ACCEPT",
  ];
}

/** Above the reject rules: the one host port the network may reach (IPv4 only; the gateway is IPv4). */
export async function allowHostPort(networkId: string, gateway: string, port: number): Promise<void> {
  const r = await run(IPV4.tool, ["-w", "-I", ...allowSpec(networkId, gateway, port)]);
  if (r.code !== 0)
    throw new Error(`iptables: cannot open port ${port} for ${bridgeName(networkId)}: ${r.stderr.trim()}`);
}

export async function removeHostPort(networkId: string, gateway: string, port: number): Promise<void> {
  for (let i = 0; i < 5; i++) {
    if ((await run(IPV4.tool, ["-w", "-D", ...allowSpec(networkId, gateway, port)])).code !== 0) break;
  }
}
