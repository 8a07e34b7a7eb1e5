import { DenvError, type ServicePlan } from "@denv/spec";
import { runExec } from "../exec-runner.js";
import type { EnvironmentRecord } from "../records.js";
import type { HostContext } from "./host-context.js";

/** Waits until each of `services` runs and passes its healthcheck (or completed, for one-shots). */
export async function waitHealthy(
  ctx: HostContext,
  rec: EnvironmentRecord,
  services: ServicePlan[],
): Promise<void> {
  const timeoutMs = ctx.settings.healthTimeoutMs;
  const deadline = Date.now() + timeoutMs;
  for (const svc of services) {
    const id = rec.containers[svc.name] as string;
    const hasCheck = svc.healthcheck?.test[0] !== "NONE";
    for (;;) {
      const state = await ctx.docker.containers.inspect(id);
      if (!state) throw new DenvError("docker", `service '${svc.name}' vanished while starting`);
      if (!state.running) {
        if (state.exitCode === 0 && !hasCheck) break;
        throw new DenvError(
          "docker",
          `service '${svc.name}' exited with ${state.exitCode} while starting${await logTail(ctx, id)}`,
        );
      }
      // "none": neither the file nor the image defines a healthcheck.
      if (!hasCheck || state.health === "healthy" || state.health === "none") break;
      if (state.health === "unhealthy") {
        throw new DenvError("docker", `service '${svc.name}' is unhealthy${await logTail(ctx, id)}`);
      }
      // Docker runs the first check only after a whole interval (engines before API 1.44 have
      // no start_interval): run the file's own check now, as Docker would, and go on as soon as
      // it passes. Forks start in about a second less per dependency level.
      if (await checkNow(ctx, id, svc)) break;
      if (Date.now() > deadline) {
        throw new DenvError(
          "timeout",
          `service '${svc.name}' was not healthy after ${timeoutMs} ms${await logTail(ctx, id)}`,
        );
      }
      await new Promise((r) => setTimeout(r, 50));
    }
  }
}

/** Waits for a one-shot service to exit 0. */
export async function waitCompleted(
  ctx: HostContext,
  rec: EnvironmentRecord,
  svc: ServicePlan,
): Promise<void> {
  const id = rec.containers[svc.name] as string;
  const code = await ctx.docker.containers.wait(id);
  if (code !== 0) {
    throw new DenvError(
      "docker",
      `service '${svc.name}' exited with ${code}; dependants need it to complete successfully${await logTail(ctx, id)}`,
    );
  }
}

/** Runs a service's compose healthcheck once, inside the container as its user; true when it passes. */
async function checkNow(ctx: HostContext, containerId: string, svc: ServicePlan): Promise<boolean> {
  const test = svc.healthcheck?.test ?? [];
  const argv =
    test[0] === "CMD-SHELL"
      ? ["/bin/sh", "-c", test.slice(1).join(" ")]
      : test[0] === "CMD"
        ? test.slice(1)
        : [];
  if (argv.length === 0) return false;
  const res = await runExec(ctx.docker, {
    containerId,
    argv,
    timeoutMs: svc.healthcheck?.timeoutMs ?? 30_000,
    outputLimit: 4096,
  }).catch(() => undefined);
  return res?.exitCode === 0;
}

/** The last log lines of a container, for an error message. */
async function logTail(ctx: HostContext, containerId: string): Promise<string> {
  const logs = await ctx.docker.containers.logs(containerId, 15).catch(() => undefined);
  if (!logs) return "";
  const text = (logs.stdout.toString() + logs.stderr.toString()).trim();
  return text ? `\nlast log lines:\n${text}` : "";
}
