import type { Plan, Resources, ServicePlan, VerifierPlan } from "@denv/spec";

/** The normalized plan for people: what denv will run, with caps and defaults applied. */
export function planText(plan: Plan, source: string): string {
  const lines: string[] = [`${source} is valid`, ""];
  const row = (indent: number, key: string, value: string) =>
    lines.push(`${" ".repeat(indent)}${key.padEnd(12)}${value}`);

  row(0, "project", `${plan.name} (${plan.kind})`);
  row(0, "egress", plan.egress);
  row(0, "agent", `service ${plan.agent.service}, user ${plan.agent.user}, workdir ${plan.agent.workdir}`);
  if (Object.keys(plan.placement).length > 0) row(0, "placement", pairs(plan.placement));
  lines.push("", "services (in start order)");
  for (const service of plan.services) serviceRows(service, row, lines);
  lines.push("");
  row(
    0,
    "volumes",
    plan.volumes.length === 0
      ? "none"
      : plan.volumes.map((v) => (plan.snapshotVolumes.includes(v) ? `${v} (snapshot)` : v)).join(", "),
  );
  if (plan.verifier === undefined) row(0, "verifier", "none");
  else {
    lines.push("verifier");
    verifierRows(plan.verifier, row);
  }
  if (plan.notes.length > 0) {
    lines.push("", "notes");
    for (const note of plan.notes) lines.push(`  ${note}`);
  }
  return `${lines.join("\n")}\n`;
}

type Row = (indent: number, key: string, value: string) => void;

function serviceRows(s: ServicePlan, row: Row, lines: string[]): void {
  lines.push(`  ${s.name}`);
  const i = 4;
  row(i, "image", s.build === undefined ? s.image : `${s.image} (built from ${buildText(s.build)})`);
  if (s.platform !== undefined) row(i, "platform", s.platform);
  if (s.entrypoint !== undefined) row(i, "entrypoint", argv(s.entrypoint));
  if (s.command !== undefined) row(i, "command", argv(s.command));
  if (s.user !== undefined) row(i, "user", s.user);
  if (s.workingDir !== undefined) row(i, "working_dir", s.workingDir);
  if (s.dependsOn.length > 0)
    row(i, "depends_on", s.dependsOn.map((d) => `${d.service} (${d.condition})`).join(", "));
  const env = Object.keys(s.environment);
  if (env.length > 0) row(i, "environment", env.join(", "));
  if (s.volumes.length > 0) {
    row(i, "volumes", s.volumes.map((v) => `${v.source}:${v.target}${v.readOnly ? ":ro" : ""}`).join(", "));
  }
  if (s.tmpfs.length > 0) row(i, "tmpfs", s.tmpfs.join(", "));
  if (s.networkMode !== undefined) row(i, "network", s.networkMode);
  else row(i, "aliases", s.aliases.join(", "));
  if (s.expose.length > 0) row(i, "expose", s.expose.join(", "));
  if (s.ports.length > 0) {
    row(
      i,
      "ports",
      s.ports
        .map(
          (p) =>
            `${p.hostIp === undefined ? "" : `${p.hostIp}:`}${p.published ?? "*"}->${p.target}/${p.protocol}`,
        )
        .join(", "),
    );
  }
  if (s.healthcheck !== undefined)
    row(i, "healthcheck", s.healthcheck.test.length === 0 ? "(the image's)" : argv(s.healthcheck.test));
  if (s.restart !== undefined)
    row(i, "restart", s.restart + (s.restartMaxRetries === undefined ? "" : `:${s.restartMaxRetries}`));
  if (s.capDrop.length > 0) row(i, "cap_drop", s.capDrop.join(", "));
  if (Object.keys(s.labels).length > 0) row(i, "labels", pairs(s.labels));
  row(i, "caps", capsText(s.resources));
  if (s.dnsOpt.length > 0) row(i, "dns_opt", s.dnsOpt.join(", "));
}

function verifierRows(v: VerifierPlan, row: Row): void {
  const i = 4;
  row(i, "image", v.build === undefined ? v.image : `${v.image} (built from ${buildText(v.build)})`);
  row(i, "command", argv(v.command));
  row(i, "user", v.user);
  row(i, "timeout", `${v.timeoutSec}s`);
  row(i, "tests", v.tests === undefined ? "none" : `${v.tests} -> /tests`);
  row(
    i,
    "submission",
    v.submission.length === 0 ? "none" : v.submission.map((p) => `${p} -> /submission${p}`).join(", "),
  );
  const env = Object.keys(v.environment);
  if (env.length > 0) row(i, "environment", env.join(", "));
  row(i, "caps", capsText(v.resources));
}

function buildText(b: { context: string; dockerfile: string; target?: string | undefined }): string {
  return `${b.context}, ${b.dockerfile}${b.target === undefined ? "" : `, target ${b.target}`}`;
}

function argv(command: string | string[]): string {
  return typeof command === "string" ? command : JSON.stringify(command);
}

function pairs(record: Record<string, string>): string {
  return Object.entries(record)
    .map(([k, v]) => `${k}=${v}`)
    .join(", ");
}

function capsText(r: Resources): string {
  return `memory ${bytesText(r.memoryBytes)}, cpus ${r.cpus}, pids ${r.pids}`;
}

function bytesText(bytes: number): string {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && value % 1024 === 0 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return `${value} ${units[unit]}`;
}
