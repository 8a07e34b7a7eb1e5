import { isIP } from "node:net";
import { DenvError, type Plan } from "@denv/spec";
import type { NetworkRule } from "./prime-api.js";
import { PROVIDER, type PrimeHost, primeName, provider } from "./prime-host.js";
import { asRoot } from "./prime-shell.js";

/** How denv marks the lines it writes into a sandbox's /etc/hosts (a fork's are written anew). */
const HOSTS_MARK = "# denv-service";

/** How long a new member's name may take to resolve in the network. */
const RESOLVE_MS = 15_000;

/** The tag a service's sandbox carries on the network, which the rules name. */
export function serviceTag(service: string): string {
  return `service-${service}`;
}

/**
 * The network's rules: every member may open TCP connections to a service on the ports it
 * `expose`s, as compose's `expose` says who may be reached on the environment's network (Prime's
 * rules are allow-only and name their ports; a service that exposes nothing is reached by none).
 */
export function networkRules(plan: Plan): NetworkRule[] {
  return plan.services
    .filter((s) => s.expose.length > 0)
    .map((s) => ({ from: "*", to: `tag:${serviceTag(s.name)}`, ports: [...s.expose] }));
}

/**
 * A private network of the environment's own (https://docs.primeintellect.ai/sandboxes/networks)
 * with every service's sandbox a member (`sandboxes` by service name), and each sandbox's
 * /etc/hosts naming every service (its name and aliases) at its member's address, as compose's
 * network resolves them; returns the network's id. Prime names a member `<sandbox id>.sandbox.internal`:
 * the address is resolved in the agent's sandbox and checked to be an IP address before any
 * sandbox's hosts file takes it. A failure leaves the network for the caller to delete.
 */
export async function joinNetwork(
  host: PrimeHost,
  base: { project: string; name: string },
  plan: Plan,
  sandboxes: ReadonlyMap<string, string>,
  onNetwork: (id: string) => void,
): Promise<string> {
  const network = await provider(() =>
    host.api.createNetwork({
      name: primeName(host.hostId, base.project, base.name),
      rules: networkRules(plan),
    }),
  );
  onNetwork(network.id);
  for (const [service, sandboxId] of sandboxes) {
    await provider(() => host.api.putNetworkMember(network.id, sandboxId, [serviceTag(service)]));
  }
  const agentSandbox = sandboxes.get(plan.agent.service);
  if (!agentSandbox) throw new DenvError("invalid_request", `no sandbox for service ${plan.agent.service}`);
  const lines = await hostsLines(host, agentSandbox, plan, sandboxes);
  await Promise.all([...sandboxes.values()].map((sandboxId) => writeHosts(host, sandboxId, lines)));
  return network.id;
}

/**
 * A sandbox of the verifier's own (an image of its own) joined to a fork's network as a member
 * that reaches the services (the rules' `*`), its /etc/hosts naming them as theirs do.
 */
export async function joinVerifier(
  host: PrimeHost,
  networkId: string,
  verifierSandbox: string,
  plan: Plan,
  sandboxes: ReadonlyMap<string, string>,
): Promise<void> {
  await provider(() => host.api.putNetworkMember(networkId, verifierSandbox, ["verifier"]));
  await writeHosts(host, verifierSandbox, await hostsLines(host, verifierSandbox, plan, sandboxes));
}

/** Whether an environment's sandboxes need a network: several services, or a verifier of its own. */
export function needsNetwork(plan: Plan, ownVerifier: boolean): boolean {
  return plan.services.length > 1 || ownVerifier;
}

/** The hosts lines naming every service (its name and aliases) at its member's address, resolved in `from`. */
async function hostsLines(
  host: PrimeHost,
  from: string,
  plan: Plan,
  sandboxes: ReadonlyMap<string, string>,
): Promise<string[]> {
  const ips = await resolveMembers(
    host,
    from,
    plan.services.map((s) => `${sandboxes.get(s.name)}.sandbox.internal`),
  );
  return plan.services.map(
    (s, i) => `${ips[i]} ${[s.name, ...s.aliases.filter((a) => a !== s.name)].join(" ")} ${HOSTS_MARK}`,
  );
}

/**
 * Members' addresses, as each `<id>.sandbox.internal` resolves in `from`: one command for all of
 * them (the first address of each, `-` for none), retried while any is new.
 */
async function resolveMembers(host: PrimeHost, from: string, names: readonly string[]): Promise<string[]> {
  const script = `set -f; for n in $DENV_NAMES; do set -- $(getent hosts "$n"); echo "\${1:--}"; done`;
  const deadline = Date.now() + RESOLVE_MS;
  for (;;) {
    const out = await asRoot(host, from)(script, { DENV_NAMES: names.join(" ") });
    const ips = out.trim().split("\n");
    const missing = names.findIndex((_, i) => isIP(ips[i] ?? "") === 0);
    if (missing < 0) return ips;
    if (Date.now() > deadline)
      throw new DenvError(
        "docker",
        `${PROVIDER}: ${names[missing]} did not resolve to an address (got '${(ips[missing] ?? "").slice(0, 80)}')`,
      );
    await new Promise((r) => setTimeout(r, 250));
  }
}

/**
 * Replaces denv's lines in the sandbox's /etc/hosts (a restored checkpoint holds its parent's) by
 * `lines`, as root, through a shell variable: no temporary file the agent could have planted.
 */
async function writeHosts(host: PrimeHost, sandboxId: string, lines: readonly string[]): Promise<void> {
  await asRoot(host, sandboxId)(
    `kept=$(grep -v ' ${HOSTS_MARK}$' /etc/hosts || true); printf '%s\\n%s\\n' "$kept" "$DENV_HOSTS" > /etc/hosts`,
    { DENV_HOSTS: lines.join("\n") },
  );
}
