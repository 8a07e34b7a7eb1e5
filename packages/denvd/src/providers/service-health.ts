import { DenvError, type Plan } from "@denv/spec";
import { startCommands } from "./e2b/build-template.js";

/**
 * Runs the service's healthcheck until it passes, as compose would (interval, retries, start
 * period), for a provider that starts the service's command itself: `check` runs a shell script
 * in the sandbox as the service's user and gives its exit code and output.
 *
 * @throws DenvError `docker` naming the service and the check's last line once the tries are spent.
 */
export async function waitHealthyWith(
  service: Plan["services"][number],
  check: (script: string) => Promise<{ exitCode: number; output: string }>,
): Promise<void> {
  const start = startCommands(service);
  const hc = service.healthcheck;
  if (!start || !hc || start.readyCmd === "true") return;
  const interval = hc.intervalMs ?? 1000;
  const tries = (hc.retries ?? 3) + Math.ceil((hc.startPeriodMs ?? 0) / interval);
  let last = "";
  for (let i = 0; i <= tries; i++) {
    const r = await check(start.readyCmd);
    if (r.exitCode === 0) return;
    last = r.output.trim().split("\n").at(-1) ?? `exit ${r.exitCode}`;
    await new Promise((res) => setTimeout(res, interval));
  }
  throw new DenvError("docker", `service '${service.name}' is unhealthy after ${tries + 1} checks: ${last}`);
}
