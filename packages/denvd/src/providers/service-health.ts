import { DenvError, type Plan } from "@denv/spec";
import { startCommands } from "./e2b/build-template.js";

/** The pause after a failed check while the service starts, growing by half up to the interval. */
const START_POLL_MS = 100;

/**
 * Runs the service's healthcheck until it passes, for a provider that starts the service's
 * command itself: `check` runs a shell script in the sandbox as the service's user and gives its
 * exit code and output. As denvd does on its own hosts (runtime/wait-healthy.ts), a starting
 * service is checked again soon after a failure (START_POLL_MS, half as long again after each,
 * up to the file's interval), not a whole interval later: the time compose would give it
 * (start period, then retries + 1 intervals) is the budget, not the count of checks.
 *
 * @throws DenvError `docker` naming the service and the check's last line once the time is spent.
 */
export async function waitHealthyWith(
  service: Plan["services"][number],
  check: (script: string) => Promise<{ exitCode: number; output: string }>,
): Promise<void> {
  const start = startCommands(service);
  const hc = service.healthcheck;
  if (!start || !hc || start.readyCmd === "true") return;
  const interval = hc.intervalMs ?? 1000;
  const deadline = Date.now() + (hc.startPeriodMs ?? 0) + ((hc.retries ?? 3) + 1) * interval;
  let last = "";
  let pause = Math.min(START_POLL_MS, interval);
  for (let checks = 1; ; checks++) {
    const r = await check(start.readyCmd);
    if (r.exitCode === 0) return;
    last = r.output.trim().split("\n").at(-1) ?? `exit ${r.exitCode}`;
    if (Date.now() + pause > deadline) {
      throw new DenvError("docker", `service '${service.name}' is unhealthy after ${checks} checks: ${last}`);
    }
    await new Promise((res) => setTimeout(res, pause));
    pause = Math.min(pause * 1.5, interval);
  }
}
