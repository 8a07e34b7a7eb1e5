import type { DenvClient } from "@denv/sdk";
import type { Deployment, Phase } from "@denv/spec";
import type { Context } from "./context.js";

/** How many log lines of a failed deployment are shown when they were not streamed. */
const FAILURE_TAIL = 20;

const seconds = (ms: number | undefined) => (ms === undefined ? "" : ` (${(ms / 1000).toFixed(1)}s)`);

/**
 * Follows a started deployment, showing each phase as it changes on stderr (and every log line
 * with --verbose; otherwise the last lines when it fails), and returns its final state.
 */
export async function follow(ctx: Context, client: DenvClient, started: Deployment): Promise<Deployment> {
  ctx.progress(`deployment ${started.id}: ${started.kind} ${started.environment}`);
  const verbose = ctx.bool("verbose");
  const tail: string[] = [];
  // On a terminal: the running phase's time and its last log line (a build step, the bytes of a
  // snapshot or a transfer, as the host reports them), rewritten in place below the phase lines.
  const live = ctx.live();
  let running: { name: string; since: number; line: string } | undefined;
  const show = (force = false) => {
    if (running === undefined) return;
    const took = ((Date.now() - running.since) / 1000).toFixed(0);
    live.update(`  ${running.name} ${took}s${running.line === "" ? "" : ` | ${running.line}`}`, { force });
  };
  const ticker = live.enabled ? setInterval(() => show(true), 1000) : undefined;
  const onPhase = (phase: Phase) => {
    if (phase.status === "running") {
      ctx.progress(`  ${phase.name} ...`);
      running = { name: phase.name, since: Date.now(), line: "" };
      show(true);
      return;
    }
    running = undefined;
    if (phase.status === "succeeded") ctx.progress(`  ${phase.name} done${seconds(phase.duration_ms)}`);
    else if (phase.status === "failed") ctx.progress(`  ${phase.name} failed${seconds(phase.duration_ms)}`);
  };
  const onLog = (line: string) => {
    if (verbose) ctx.progress(`    | ${line}`);
    else {
      tail.push(line);
      if (tail.length > FAILURE_TAIL) tail.shift();
      if (running !== undefined) {
        running.line = line;
        show();
      }
    }
  };
  let done: Deployment;
  try {
    done = await client.waitForDeployment(started.id, { onPhase, onLog });
  } finally {
    if (ticker !== undefined) clearInterval(ticker);
    live.clear();
  }
  if (done.status === "failed" && !verbose && tail.length > 0) {
    ctx.progress(`last log lines of ${done.id}:`);
    for (const line of tail) ctx.progress(`    | ${line}`);
  }
  return done;
}

/** One line about a finished deployment, and its error when it failed. */
export function outcome(d: Deployment): string {
  const took =
    d.finished_at === undefined
      ? ""
      : ` in ${((Date.parse(d.finished_at) - Date.parse(d.created_at)) / 1000).toFixed(1)}s`;
  if (d.status !== "failed") return `deployment ${d.id} ${d.status}${took}: ${d.kind} ${d.environment}`;
  const phase = d.phases.find((p) => p.status === "failed");
  return `deployment ${d.id} failed${phase === undefined ? "" : ` in phase ${phase.name}`}: ${d.error?.message ?? "no reason given"}`;
}

/**
 * Starts a deployment and, unless --no-wait, follows it. Prints the final Deployment (--json)
 * or a summary; a failed deployment exits 1.
 */
export async function runDeployment(
  ctx: Context,
  start: (client: DenvClient) => Promise<Deployment>,
  summary: (d: Deployment) => string[] = () => [],
): Promise<number> {
  const client = ctx.client();
  const started = await start(client);
  if (ctx.bool("no-wait")) {
    ctx.print(
      started,
      `deployment ${started.id} ${started.status}: ${started.kind} ${started.environment}\nfollow it with: denv deployments log ${started.id} --follow\nor open ${dashboardUrl(client.url, started.id)}`,
    );
    return 0;
  }
  const done = await follow(ctx, client, started);
  if (done.status === "failed") {
    if (ctx.json) ctx.print(done, "");
    ctx.progress(`denv ${ctx.spec.name}: ${outcome(done)}`);
    return ctx.spec.failureCode ?? 1;
  }
  ctx.print(done, () => [outcome(done), ...summary(done)].join("\n"));
  return 0;
}

/** The deployment's page in the dashboard the control plane serves (packages/web). */
export function dashboardUrl(cpUrl: string, id: string): string {
  return `${cpUrl.replace(/\/+$/, "")}/deployments/${encodeURIComponent(id)}`;
}

/** --no-wait and --verbose, for every command that starts a deployment. */
export const DEPLOYMENT_FLAGS = {
  "no-wait": { type: "boolean", description: "return once the deployment is started (print it queued)" },
  verbose: { type: "boolean", short: "v", description: "show the deployment's log lines as they come" },
} as const;
