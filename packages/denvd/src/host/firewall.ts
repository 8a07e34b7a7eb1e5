import { run } from "./run.js";

/**
 * Environment -> host traffic is rejected on the host's INPUT chain, per environment bridge.
 * REJECT (not DROP) so that a connect attempt fails at once and a probe is fast. Rules carry a
 * comment with the network id so that gc can find the ones whose network is gone.
 */

export function bridgeName(networkId: string): string {
  return `br-${networkId.slice(0, 12)}`;
}

/**
 * New connections from the environment to the host are rejected: TCP with a reset (instant, and
 * not subject to the kernel's ICMP rate limit), the rest with an ICMP error.
 */
function ruleSpecs(networkId: string): string[][] {
  const head = ["INPUT", "-i", bridgeName(networkId)];
  const tag = ["-m", "comment", "--comment", `denv:${networkId.slice(0, 12)}`];
  return [
    // Replies to connections the host opened (denvd's port tunnels) come back in on the bridge.
    [...head, "-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", ...tag, "-j", "ACCEPT"],
    [...head, "-p", "tcp", ...tag, "-j", "REJECT", "--reject-with", "tcp-reset"],
    [...head, ...tag, "-j", "REJECT", "--reject-with", "icmp-port-unreachable"],
  ];
}

export async function rejectToHost(networkId: string): Promise<void> {
  // Inserted in reverse so that the rules keep their order at the top of the chain.
  for (const spec of ruleSpecs(networkId).reverse()) {
    if ((await run("iptables", ["-w", "-C", ...spec])).code === 0) continue;
    const r = await run("iptables", ["-w", "-I", ...spec]);
    if (r.code !== 0) {
      throw new Error(
        `iptables: cannot add the reject rule for ${bridgeName(networkId)}: ${r.stderr.trim()}`,
      );
    }
  }
}

export async function hasRejectRule(networkId: string): Promise<boolean> {
  for (const spec of ruleSpecs(networkId)) {
    if ((await run("iptables", ["-w", "-C", ...spec])).code !== 0) return false;
  }
  return true;
}

export async function removeRejectRule(networkId: string): Promise<void> {
  for (const spec of ruleSpecs(networkId)) {
    // Loop: an interrupted run may have inserted a rule twice.
    for (let i = 0; i < 5; i++) {
      if ((await run("iptables", ["-w", "-D", ...spec])).code !== 0) break;
    }
  }
}

/** Network ids (12 chars) of every denv rule present, for gc. */
export async function ruleNetworkIds(): Promise<string[]> {
  const r = await run("iptables", ["-w", "-S", "INPUT"]);
  if (r.code !== 0) return [];
  return [...r.stdout.matchAll(/--comment "?denv:([0-9a-f]{12})"?/g)].map((m) => m[1] as string);
}
