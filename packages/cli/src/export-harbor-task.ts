import { cpSync, existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { HarborTaskMessages as M } from "@denv/spec";
import YAML from "yaml";
import { CliError } from "./exit-codes.js";
import { asRecord, assertEmpty, DEFAULT_WORKDIR } from "./harbor-task.js";

const tomlString = (v: string) => JSON.stringify(v);

export interface ExportResult {
  directory: string;
  version: string;
  service: string;
  files: string[];
}

/**
 * Writes OUT, a Harbor task folder, from a denv project folder (the source of `version`): one
 * service (the agent's, which becomes Harbor's `main`) built from a folder in the project.
 */
export function exportHarborTask(
  source: string,
  out: string,
  version: string,
  labels = { source, out },
): ExportResult {
  const composeName = ["compose.yaml", "compose.yml", "docker-compose.yaml", "docker-compose.yml"].find((n) =>
    existsSync(path.join(source, n)),
  );
  if (!composeName) throw new CliError("invalid_request", M.missingFile(`${labels.source}/compose.yaml`));
  const label = `${labels.source}/${composeName}`;
  const doc = asRecord(YAML.parse(readFileSync(path.join(source, composeName), "utf8")));
  const services = asRecord(doc.services);
  const x = asRecord(doc["x-denv"]);
  const names = Object.keys(services);
  const agentCfg = typeof x.agent === "string" ? { service: x.agent } : asRecord(x.agent);
  const service =
    (typeof agentCfg.service === "string" ? agentCfg.service : undefined) ??
    (names.length === 1 ? names[0] : names.find((n) => n === "main" || n === "default"));
  if (service === undefined || services[service] === undefined) {
    throw new CliError(
      "invalid_request",
      M.unsupported(label, "x-denv.agent", "names no service of the file"),
    );
  }
  const svc = asRecord(services[service]);
  const verifier = asRecord(x.verifier);
  if (x.verifier === undefined) {
    throw new CliError(
      "invalid_request",
      M.unsupported(label, "x-denv.verifier", "missing; Harbor grades with tests/test.sh"),
    );
  }
  const instruction = path.join(source, "instruction.md");
  if (!existsSync(instruction))
    throw new CliError("invalid_request", M.missingFile(`${labels.source}/instruction.md`));
  const workdir =
    (typeof agentCfg.workdir === "string" ? agentCfg.workdir : undefined) ??
    (typeof svc.working_dir === "string" ? svc.working_dir : undefined) ??
    DEFAULT_WORKDIR;
  const sidecars = names.filter((n) => n !== service);
  for (const name of sidecars) checkSidecar(label, name, asRecord(services[name]));
  assertEmpty(out, labels.out);
  mkdirSync(path.join(out, "environment"), { recursive: true });
  let agentContext: string | undefined;
  if (svc.build !== undefined) {
    const b = typeof svc.build === "string" ? { context: svc.build } : asRecord(svc.build);
    const ctx = path.join(source, typeof b.context === "string" ? b.context : ".");
    agentContext = ctx;
    const df = typeof b.dockerfile === "string" ? b.dockerfile : "Dockerfile";
    cpSync(ctx, path.join(out, "environment"), { recursive: true });
    // Harbor builds environment/Dockerfile: the one the service builds (as root: Harbor's own way).
    writeFileSync(path.join(out, "environment", "Dockerfile"), readFileSync(path.join(ctx, df), "utf8"));
  } else if (typeof svc.image === "string") {
    writeFileSync(path.join(out, "environment", "Dockerfile"), `FROM ${svc.image}\nWORKDIR ${workdir}\n`);
  } else {
    throw new CliError(
      "invalid_request",
      M.unsupported(label, `services.${service}`, "has neither build nor image"),
    );
  }
  if (sidecars.length > 0) {
    const compose = sidecarCompose(source, out, doc, service, sidecars, agentContext);
    writeFileSync(
      path.join(out, "environment", "docker-compose.yaml"),
      `# Written by 'denv export harbor' from ${version}: Harbor builds 'main' (the agent's service${
        service === "main" ? "" : `, '${service}' in denv`
      })\n# from this folder and merges this file over its own.\n${YAML.stringify(compose)}`,
    );
  }
  // tests/: the verifier's tests, and test.sh running the verifier's command in main.
  const testsOut = path.join(out, "tests");
  mkdirSync(testsOut, { recursive: true });
  if (typeof verifier.tests === "string")
    cpSync(path.join(source, verifier.tests), testsOut, { recursive: true });
  if (!existsSync(path.join(testsOut, "test.sh"))) {
    const command = verifier.command;
    if (command === undefined) {
      throw new CliError("invalid_request", M.unsupported(label, "x-denv.verifier.command", "missing"));
    }
    const line = Array.isArray(command)
      ? command.map((a) => `'${String(a).replace(/'/g, "'\\''")}'`).join(" ")
      : String(command);
    const subs = Array.isArray(verifier.submission)
      ? verifier.submission.map(String)
      : typeof verifier.submission === "string"
        ? [verifier.submission]
        : [];
    const links = subs
      .map((p) => `mkdir -p "$(dirname /submission${p})" && ln -sfn '${p}' '/submission${p}'`)
      .join("\n");
    writeFileSync(
      path.join(testsOut, "test.sh"),
      `#!/bin/bash
# Written by 'denv export harbor' from ${version}: runs the denv verifier's command in Harbor's
# main container. The submission paths are linked where a denv verifier finds them (/submission).
mkdir -p /logs/verifier
${links}
${line}
`,
      { mode: 0o755 },
    );
  }
  if (existsSync(path.join(source, "solution")))
    cpSync(path.join(source, "solution"), path.join(out, "solution"), { recursive: true });
  cpSync(instruction, path.join(out, "instruction.md"));
  const timeout = typeof verifier.timeout === "number" ? verifier.timeout : 600;
  const toml = path.join(source, "task.toml");
  if (existsSync(toml)) cpSync(toml, path.join(out, "task.toml"));
  else {
    writeFileSync(
      path.join(out, "task.toml"),
      `# Written by 'denv export harbor' from ${version}.
schema_version = "1.4"

[metadata]
source = ${tomlString(version)}

[verifier]
timeout_sec = ${timeout.toFixed(1)}

[agent]
timeout_sec = 600.0

[environment]
workdir = ${tomlString(workdir)}
network_mode = "no-network"
`,
    );
  }
  return { directory: out, version, service, files: readdirSync(out).sort() };
}

/** Keys of a compose service that Harbor's docker backend receives as they are. */
const SIDECAR_KEYS = new Set([
  "image",
  "build",
  "command",
  "entrypoint",
  "environment",
  "volumes",
  "tmpfs",
  "healthcheck",
  "expose",
  "depends_on",
  "user",
  "working_dir",
  "init",
  "restart",
  "stop_grace_period",
  "stop_signal",
  "cap_drop",
  "mem_limit",
  "cpus",
  "pids_limit",
  "deploy",
  "labels",
  "hostname",
  "networks",
  "network_mode",
  "platform",
  "shm_size",
  "ulimits",
]);

/** A service other than the agent's, as Harbor's docker backend can take it. */
function checkSidecar(label: string, name: string, svc: Record<string, unknown>): void {
  for (const key of Object.keys(svc)) {
    if (!SIDECAR_KEYS.has(key) && !key.startsWith("x-")) {
      throw new CliError(
        "invalid_request",
        M.unsupported(label, `services.${name}.${key}`, "export harbor cannot carry it into a Harbor task"),
      );
    }
  }
  if (svc.build === undefined && typeof svc.image !== "string") {
    throw new CliError(
      "invalid_request",
      M.unsupported(label, `services.${name}`, "has neither build nor image"),
    );
  }
}

/**
 * environment/docker-compose.yaml of a task with more than one service: the agent's service as
 * Harbor's `main` (built from environment/, reachable under its denv name too), the others as
 * they are, their build contexts under environment/ (a context inside the agent's, already
 * copied, is referred to where it is; another is copied to environment/<service>/).
 */
function sidecarCompose(
  source: string,
  out: string,
  doc: Record<string, unknown>,
  agent: string,
  sidecars: string[],
  agentContext: string | undefined,
): Record<string, unknown> {
  const services = asRecord(doc.services);
  const rename = (deps: unknown): unknown => {
    if (Array.isArray(deps)) return deps.map((d) => (d === agent ? "main" : d));
    if (deps && typeof deps === "object")
      return Object.fromEntries(Object.entries(deps).map(([k, v]) => [k === agent ? "main" : k, v]));
    return deps;
  };
  const result: Record<string, unknown> = {};
  const a = asRecord(services[agent]);
  const main: Record<string, unknown> = {
    build: { context: "." },
    command: a.command ?? ["sleep", "infinity"],
  };
  for (const key of ["environment", "volumes", "depends_on", "working_dir", "tmpfs"]) {
    if (a[key] !== undefined) main[key] = key === "depends_on" ? rename(a[key]) : a[key];
  }
  if (agent !== "main") main.networks = { default: { aliases: [agent] } };
  result.main = main;
  for (const name of sidecars) {
    const svc: Record<string, unknown> = Object.fromEntries(
      Object.entries(asRecord(services[name])).filter(([k]) => !k.startsWith("x-") && k !== "networks"),
    );
    if (svc.depends_on !== undefined) svc.depends_on = rename(svc.depends_on);
    if (svc.build !== undefined) {
      const b = typeof svc.build === "string" ? { context: svc.build } : asRecord(svc.build);
      const ctx = path.resolve(source, typeof b.context === "string" ? b.context : ".");
      const inside = agentContext !== undefined && !path.relative(agentContext, ctx).startsWith("..");
      let context: string;
      if (inside && agentContext !== undefined) {
        context = `./${path.relative(agentContext, ctx) || "."}`.replace(/\/\.$/, "");
      } else {
        cpSync(ctx, path.join(out, "environment", name), { recursive: true });
        context = `./${name}`;
      }
      svc.build = { ...b, context };
    }
    result[name] = svc;
  }
  return { services: result, volumes: doc.volumes };
}
