import { EgressFindings, type EgressProbe, ProviderMessages } from "@denv/spec";
import { type E2bSandbox, loadE2b } from "./e2b-sdk.js";
import { shellQuote } from "./sandbox-exec.js";
import type { SandboxUser } from "./sandbox-user.js";

/** A listener denv runs (or a test runs) that nothing inside an environment may reach. */
export interface EgressCanary {
  host: string;
  port: number;
}

/** Seconds a connect from the sandbox may take before it counts as blocked (a drop, not a reject). */
const CONNECT_TIMEOUT_S = 3;

/**
 * The egress probe of a sandbox (protection 5 as E2B enforces it): what isolates the sandbox is
 * E2B's network policy (`allowInternetAccess: false`), not denv's internal network and firewall
 * rule; the evidence says so. The probe reads the policy E2B reports for the sandbox, and from
 * inside it, as the agent, its routes and resolvers and a connect to each canary; it connects to
 * nothing else. The sandbox's default route is evidence, not a finding: under E2B the policy, not
 * the routing table, is what stops traffic.
 */
export async function probeSandboxEgress(
  sbx: E2bSandbox,
  agent: SandboxUser,
  service: string,
  canaries: readonly EgressCanary[],
): Promise<EgressProbe> {
  const { CommandExitError } = await loadE2b();
  const info = await sbx.getInfo();
  const allowInternet = (info as { allowInternetAccess?: boolean }).allowInternetAccess !== false;
  const run = async (script: string) => {
    try {
      return (await sbx.commands.run(script, { user: agent.name, cwd: "/", timeoutMs: 0 })).stdout;
    } catch (e) {
      if (!(e instanceof CommandExitError)) throw e;
      return e.stdout;
    }
  };
  return probeFromInside(
    run,
    {
      sandboxId: sbx.sandboxId,
      internetAllowed: allowInternet,
      policy: `e2b network policy (allowInternetAccess: ${allowInternet})`,
    },
    service,
    canaries,
  );
}

/**
 * The probe's half inside a sandbox, for any provider: `run` runs a shell script there as the
 * agent and gives its stdout (whatever its exit). `policy` names what isolates the sandbox, and
 * `internetAllowed` is what the provider reports of it: a finding of its own when true.
 */
export async function probeFromInside(
  run: (script: string) => Promise<string>,
  sandbox: { sandboxId: string; internetAllowed: boolean; policy: string },
  service: string,
  canaries: readonly EgressCanary[],
): Promise<EgressProbe> {
  const started = Date.now();
  const allowInternet = sandbox.internetAllowed;
  const findings: string[] = [];
  if (allowInternet) findings.push(ProviderMessages.internetAllowed(sandbox.sandboxId));

  const targets = canaries.map((c) => shellQuote(`${c.host} ${c.port}`)).join(" ");
  const script = [
    "echo '--routes'; cat /proc/net/route 2>/dev/null",
    "echo '--resolv'; cat /etc/resolv.conf 2>/dev/null",
    "echo '--canaries'",
    `for t in ${targets}; do set -- $t; ` +
      `timeout ${CONNECT_TIMEOUT_S} bash -c 'exec 3<>/dev/tcp/'"$1"'/'"$2" 2>/dev/null; echo "$? $1:$2"; done`,
  ].join("; ");
  const text = await run(script);
  const section = (name: string) => {
    const after = text.split(`--${name}\n`)[1] ?? "";
    return (
      after
        .split(/\n--\w+\n/)[0]
        ?.split("\n")
        .filter((l) => l.trim() !== "") ?? []
    );
  };
  const routes = section("routes")
    .slice(1)
    .map((l) => l.trim().split(/\s+/))
    .map(([iface = "", dest = "", gateway = ""]) => `${iface} ${hexIp(dest)} via ${hexIp(gateway)}`);
  const defaultRoute = routes.some((r) => / 0\.0\.0\.0 via /.test(r));
  const routeOut = routes.some((r) => !r.endsWith(" via 0.0.0.0"));
  const nameservers = section("resolv")
    .filter((l) => l.startsWith("nameserver"))
    .map((l) => l.split(/\s+/)[1] ?? "");
  let reached = false;
  const answers = section("canaries");
  for (const c of canaries) {
    const line = answers.find((l) => l.endsWith(` ${c.host}:${c.port}`));
    const status = line === undefined ? undefined : Number(line.split(" ")[0]);
    if (status === 0) reached = true;
    // 1: refused, 124: no answer within the timeout; anything else means the probe did not run.
    else if (status !== 1 && status !== 124) {
      findings.push(
        ProviderMessages.probeFailed(
          service,
          `connect to ${c.host}:${c.port} ended with ${status ?? "no answer"} (the probe needs bash and timeout)`,
        ),
      );
    }
  }
  if (reached) findings.push(EgressFindings.hostReachable(service));
  return {
    ok: findings.length === 0,
    findings,
    network: {
      name: sandbox.policy,
      internal: !allowInternet,
      reject_rule: false,
    },
    services: [
      {
        service,
        routes,
        default_route: defaultRoute,
        route_out: routeOut,
        canary_reached: reached,
        canary_from: service,
        nameservers,
        networks: [],
      },
    ],
    duration_ms: Date.now() - started,
  };
}

/** /proc/net/route's little-endian hex address as dotted quads. */
function hexIp(hex: string): string {
  const n = Number.parseInt(hex, 16);
  if (!Number.isFinite(n)) return hex;
  return [0, 8, 16, 24].map((s) => (n >>> s) & 0xff).join(".");
}
