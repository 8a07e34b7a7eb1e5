import { DenvError, type ServicePlan } from "@denv/spec";
import { runExec } from "../exec-runner.js";
import type { EnvironmentRecord } from "../records.js";
import type { HostContext } from "./host-context.js";

/**
 * How soon a starting service's healthcheck runs again after it failed, whatever its interval:
 * START_POLL_MS after the first failure, half as long again after each next one, up to
 * MAX_POLL_MS, and never sooner than the failed check took. A service that comes up at once is
 * seen at once; many starting together on a busy host do not run their checks (a process in the
 * container each) back to back: at a fixed 50 ms, 46 quickstart forks started at once on 2 cores
 * spent the cores on their own checks, and one was not healthy after 120 s (e2e/episodes.test.ts).
 */
const START_POLL_MS = 50;
const MAX_POLL_MS = 1_000;

/**
 * Waits until a started service runs and passes its healthcheck (or completed, for a one-shot).
 *
 * Docker runs the first check only after a whole `interval` (engines before API 1.44 have no
 * `start_interval`), so a service with `interval: 30s` would count as starting for 30 s. While
 * the service starts, denvd runs the file's own check itself, inside the container as Docker
 * would, every START_POLL_MS after a failure, and goes on as soon as it passes; Docker's own
 * status counts too (healthy, or unhealthy: a failure). Docker's healthcheck is never changed,
 * so once the service is up the file's interval, timeout and retries govern it as written.
 * A check that only the image defines (the file gives none, or only its timings) is not known
 * here: for it denvd waits for Docker's own status.
 *
 * Gives up after the host's health timeout, or as soon as `signal` aborts (another service of
 * the environment failed): then it throws the signal's reason.
 */
export async function waitHealthy(
  ctx: HostContext,
  rec: EnvironmentRecord,
  svc: ServicePlan,
  signal?: AbortSignal,
): Promise<void> {
  const timeoutMs = ctx.settings.healthTimeoutMs;
  const deadline = Date.now() + timeoutMs;
  const id = rec.containers[svc.name] as string;
  const hasCheck = svc.healthcheck?.test[0] !== "NONE";
  const argv = checkArgv(svc);
  let pause = START_POLL_MS;
  for (;;) {
    signal?.throwIfAborted();
    const state = await ctx.docker.containers.inspect(id);
    if (!state) throw new DenvError("docker", `service '${svc.name}' vanished while starting`);
    if (!state.running) {
      // A one-shot: done when it exited 0 and no healthcheck (the file's or the image's) expected it to run.
      if (state.exitCode === 0 && (!hasCheck || state.health === "none")) return;
      throw new DenvError(
        "docker",
        `service '${svc.name}' exited with ${state.exitCode} while starting${await logTail(ctx, id)}`,
      );
    }
    // "none": neither the file nor the image defines a healthcheck.
    if (!hasCheck || state.health === "healthy" || state.health === "none") return;
    if (state.health === "unhealthy") {
      throw new DenvError("docker", `service '${svc.name}' is unhealthy${await logTail(ctx, id)}`);
    }
    const checked = Date.now();
    if (argv.length > 0 && (await untilAborted(checkNow(ctx, id, svc, argv), signal))) return;
    const took = Date.now() - checked;
    if (Date.now() > deadline) {
      throw new DenvError(
        "timeout",
        `service '${svc.name}' was not healthy after ${timeoutMs} ms${await logTail(ctx, id)}`,
      );
    }
    await sleep(Math.max(pause, took), signal);
    pause = Math.min(pause * 1.5, MAX_POLL_MS);
  }
}

/** Waits for a one-shot service to exit 0 (or for `signal` to abort). */
export async function waitCompleted(
  ctx: HostContext,
  rec: EnvironmentRecord,
  svc: ServicePlan,
  signal?: AbortSignal,
): Promise<void> {
  const id = rec.containers[svc.name] as string;
  const code = await untilAborted(ctx.docker.containers.wait(id), signal);
  if (code !== 0) {
    throw new DenvError(
      "docker",
      `service '${svc.name}' exited with ${code}; dependants need it to complete successfully${await logTail(ctx, id)}`,
    );
  }
}

/** The argv of the file's healthcheck (empty when the file leaves the check to the image). */
function checkArgv(svc: ServicePlan): string[] {
  const test = svc.healthcheck?.test ?? [];
  if (test[0] === "CMD-SHELL") return ["/bin/sh", "-c", test.slice(1).join(" ")];
  if (test[0] === "CMD") return test.slice(1);
  return [];
}

/** Runs a service's compose healthcheck once, inside the container as its user; true when it passes. */
async function checkNow(
  ctx: HostContext,
  containerId: string,
  svc: ServicePlan,
  argv: string[],
): Promise<boolean> {
  const res = await runExec(ctx.docker, {
    containerId,
    argv,
    timeoutMs: svc.healthcheck?.timeoutMs ?? 30_000,
    outputLimit: 4096,
  }).catch(() => undefined);
  return res?.exitCode === 0;
}

/**
 * `p`, or the signal's reason as soon as it aborts. What `p` was doing goes on and is left to
 * end by itself (an exec in a container that the rollback removes, a wait that it ends).
 */
function untilAborted<T>(p: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
  if (!signal) return p;
  return new Promise<T>((resolve, reject) => {
    if (signal.aborted) {
      p.catch(() => undefined);
      reject(signal.reason);
      return;
    }
    const onAbort = () => reject(signal.reason);
    signal.addEventListener("abort", onAbort, { once: true });
    p.then(
      (v) => {
        signal.removeEventListener("abort", onAbort);
        resolve(v);
      },
      (err: unknown) => {
        signal.removeEventListener("abort", onAbort);
        reject(err);
      },
    );
  });
}

function sleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return untilAborted(new Promise<void>((r) => setTimeout(r, ms)), signal);
}

/** The last log lines of a container, for an error message. */
async function logTail(ctx: HostContext, containerId: string): Promise<string> {
  const logs = await ctx.docker.containers.logs(containerId, 15).catch(() => undefined);
  if (!logs) return "";
  const text = (logs.stdout.toString() + logs.stderr.toString()).trim();
  return text ? `\nlast log lines:\n${text}` : "";
}
