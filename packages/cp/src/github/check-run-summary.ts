import type { Phase } from "@denv/spec";
import type { DeploymentRecord } from "../store/records.js";
import type { CheckRunOutput } from "./github-app.js";

/** GitHub's limit on a check run's output.summary and output.text. */
const MAX_OUTPUT = 65_535;

/**
 * The check run's output for a deployment as it stands: a title, then a summary with the outcome,
 * the version, the reward when a phase recorded one, and a table of the phases with their
 * durations and key evidence; a failure's message in full (a refused compose file's lines) as text.
 */
export function checkRunOutput(d: DeploymentRecord): CheckRunOutput {
  const version = (d.result as { version?: unknown } | undefined)?.version;
  const reward = d.phases
    .map((p) => (p.evidence as { reward?: unknown } | undefined)?.reward)
    .find((r) => r !== undefined);
  const title =
    d.status === "succeeded"
      ? `deployed ${typeof version === "string" ? version : d.environment}`
      : d.status === "failed"
        ? `failed: ${firstLine(d.error?.message ?? "the deployment failed")}`
        : `deploying ${d.environment}: ${d.phases.find((p) => p.status === "running")?.name ?? d.status}`;
  const lines = [
    `**${d.status}**: ${d.kind} of \`${d.environment}\` (deployment \`${d.id}\`)`,
    ...(typeof version === "string" ? [``, `Version: \`${version}\``] : []),
    ...(reward !== undefined ? [``, `Reward: ${JSON.stringify(reward)}`] : []),
    ``,
    `| phase | status | duration | evidence |`,
    `| --- | --- | --- | --- |`,
    ...d.phases.map((p) => `| ${p.name} | ${p.status} | ${duration(p)} | ${cell(keyEvidence(p))} |`),
  ];
  const text = d.status === "failed" && d.error ? ["```", d.error.message, "```"].join("\n") : undefined;
  return {
    title: title.slice(0, 255),
    summary: lines.join("\n").slice(0, MAX_OUTPUT),
    ...(text ? { text: text.slice(0, MAX_OUTPUT) } : {}),
  };
}

function duration(p: Phase): string {
  return p.duration_ms === undefined ? "" : `${(p.duration_ms / 1000).toFixed(1)} s`;
}

function firstLine(s: string): string {
  return s.split("\n")[0] ?? s;
}

/** The evidence people look for first in each phase; the rest is on the deployment's page. */
function keyEvidence(p: Phase): string {
  const e = (p.evidence ?? {}) as Record<string, unknown>;
  if (typeof e.error === "string") return e.error;
  const git = e.git as { commit?: unknown } | undefined;
  if (git?.commit) return `commit ${String(git.commit).slice(0, 12)}`;
  const parts: string[] = [];
  for (const key of ["host", "reason", "version", "method", "reward", "egress", "digests"]) {
    if (e[key] === undefined) continue;
    const v = typeof e[key] === "string" ? e[key] : JSON.stringify(e[key]);
    parts.push(`${key}: ${v}`);
  }
  if (parts.length === 0) {
    const first = Object.entries(e)[0];
    if (first) parts.push(`${first[0]}: ${JSON.stringify(first[1])}`);
  }
  return parts.join("; ");
}

function cell(s: string): string {
  const flat = s.replace(/\s+/g, " ").replace(/\|/g, "\\|");
  return flat.length > 160 ? `${flat.slice(0, 157)}...` : flat;
}
