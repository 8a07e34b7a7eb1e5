import type { DeploymentEvent } from "@denv/sdk";
import type { Deployment } from "@denv/spec";
import type { CommandSpec, GroupSpec } from "../command.js";
import { fields, table, when } from "../format.js";
import { outcome } from "../progress.js";

/** How long a log without --follow waits for more after the replay of a running deployment. */
const QUIET_MS = 300;

const list: CommandSpec = {
  name: "deployments list",
  summary: "list a project's deployments, newest first",
  args: "[PROJECT]",
  remote: true,
  async run(ctx) {
    const [given] = ctx.args(0, 1, "PROJECT");
    const deployments = await ctx.client().listDeployments(ctx.project(given));
    ctx.print({ deployments }, () =>
      table(
        ["ID", "KIND", "ENVIRONMENT", "STATUS", "CREATED"],
        deployments.map((d) => [d.id, d.kind, d.environment, d.status, when(d.created_at)]),
        "no deployments",
      ),
    );
    return 0;
  },
};

const show: CommandSpec = {
  name: "deployments show",
  summary: "show a deployment: its phases, their timing and evidence",
  args: "ID",
  remote: true,
  async run(ctx) {
    const [id = ""] = ctx.args(1, 1, "ID");
    const d = await ctx.client().getDeployment(id);
    ctx.print(d, () => showText(d));
    return 0;
  },
};

function showText(d: Deployment): string {
  const head = fields([
    ["id", d.id],
    ["kind", d.kind],
    ["environment", d.environment],
    ["status", d.status],
    ["host", d.host_id],
    ["created", when(d.created_at)],
    ["finished", when(d.finished_at)],
    ["error", d.error === undefined ? undefined : `${d.error.code}: ${d.error.message}`],
  ]);
  const phases = table(
    ["PHASE", "STATUS", "DURATION", "EVIDENCE"],
    d.phases.map((p) => [
      p.name,
      p.status,
      p.duration_ms === undefined ? undefined : `${(p.duration_ms / 1000).toFixed(1)}s`,
      p.evidence === undefined ? undefined : JSON.stringify(p.evidence),
    ]),
    "no phases",
  );
  return `${head}\n\n${phases}`;
}

const log: CommandSpec = {
  name: "deployments log",
  summary: "print a deployment's phase log (--follow: until it finishes)",
  args: "ID [--follow]",
  description: `
Prints the phase changes and log lines of deployment ID. Without --follow it prints what has
been logged so far; with --follow it stays until the deployment finishes, then prints the
outcome. --json prints one object {deployment, events} once the output is complete.`,
  flags: {
    follow: { type: "boolean", short: "f", description: "keep printing until the deployment finishes" },
  },
  remote: true,
  async run(ctx) {
    const [id = ""] = ctx.args(1, 1, "ID");
    const client = ctx.client();
    const current = await client.getDeployment(id);
    const finished = current.status === "succeeded" || current.status === "failed";
    const follow = ctx.bool("follow") || finished;
    const controller = new AbortController();
    let quiet: NodeJS.Timeout | undefined;
    const arm = () => {
      if (follow) return;
      clearTimeout(quiet);
      quiet = setTimeout(() => controller.abort(), QUIET_MS);
    };
    const events: DeploymentEvent[] = [];
    let final: Deployment = current;
    arm();
    try {
      for await (const event of client.deploymentEvents(id, { signal: controller.signal })) {
        arm();
        events.push(event);
        if (event.type === "done") final = event.deployment;
        if (!ctx.json) ctx.io.stdout(`${eventText(event)}\n`);
      }
    } catch (err) {
      if (!controller.signal.aborted) throw err;
    } finally {
      clearTimeout(quiet);
    }
    if (ctx.json) ctx.print({ deployment: final, events }, "");
    return final.status === "failed" && ctx.bool("follow") ? 1 : 0;
  },
};

function eventText(event: DeploymentEvent): string {
  if (event.type === "log") return `    | ${event.line}`;
  if (event.type === "done") return outcome(event.deployment);
  const p = event.phase;
  const took = p.duration_ms === undefined ? "" : ` (${(p.duration_ms / 1000).toFixed(1)}s)`;
  return `  ${p.name} ${p.status === "running" ? "..." : p.status === "succeeded" ? `done${took}` : p.status}`;
}

export const deployments: GroupSpec = {
  name: "deployments",
  summary: "list deployments, show one, print its phase log",
  subcommands: [list, show, log],
};
