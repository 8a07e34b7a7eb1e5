import { cpSync, existsSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import path from "node:path";
import { HarborTaskMessages as M } from "@denv/spec";
import YAML from "yaml";
import { CliError } from "./exit-codes.js";

/**
 * Harbor task folder <-> denv project folder, without Harbor (`denv import harbor`,
 * `denv export harbor`). Layout of a Harbor task: task.toml, instruction.md,
 * environment/{Dockerfile | docker-compose.yaml with service main}, tests/test.sh,
 * solution/solve.sh. In a Harbor container: /logs/verifier/reward.txt|json, /tests, /solution.
 */

export const AGENT_UID = "1000";
export const VERIFIER_UID = "1001";
export const DEFAULT_WORKDIR = "/workspace";
export const GENERATED_DOCKERFILE = "Dockerfile.denv";
const COMPOSE_NAMES = ["docker-compose.yaml", "docker-compose.yml", "compose.yaml", "compose.yml"];

type Toml = Record<string, Record<string, unknown>>;

/** A small TOML reader: [tables] (dotted names kept as they are) and `key = value` lines. */
export function parseToml(text: string, file: string): Toml {
  const out: Toml = { "": {} };
  let table = "";
  for (const [i, raw] of text.split("\n").entries()) {
    const line = raw.trim();
    if (line === "" || line.startsWith("#")) continue;
    const header = /^\[([A-Za-z0-9_.-]+)\]$/.exec(line);
    if (header) {
      table = header[1] ?? "";
      out[table] ??= {};
      continue;
    }
    const kv = /^([A-Za-z0-9_-]+)\s*=\s*(.+)$/.exec(line);
    if (!kv) throw new CliError("invalid_request", `${file}:${i + 1}: cannot read '${line}'`);
    const [, key = "", value = ""] = kv;
    const target = out[table] ?? {};
    out[table] = target;
    target[key] = tomlValue(value.replace(/\s+#[^"']*$/, "").trim());
  }
  return out;
}

function tomlValue(v: string): unknown {
  if (v === "true" || v === "false") return v === "true";
  if (/^[+-]?\d+(\.\d+)?$/.test(v)) return Number(v);
  if (v.startsWith('"') && v.endsWith('"')) return JSON.parse(v);
  if (v.startsWith("'") && v.endsWith("'")) return v.slice(1, -1);
  if (v.startsWith("[")) {
    try {
      return JSON.parse(v.replace(/'/g, '"'));
    } catch {
      return v;
    }
  }
  return v;
}

const tomlString = (v: string) => JSON.stringify(v);

/** The last WORKDIR of a Dockerfile when it is an absolute path without variables. */
export function dockerfileWorkdir(dockerfile: string): string | undefined {
  const found = [...dockerfile.matchAll(/^\s*WORKDIR\s+(\S+)\s*$/gim)].map((m) => m[1] ?? "");
  const last = found.at(-1)?.replace(/^["']|["']$/g, "");
  return last?.startsWith("/") && !last.includes("$") ? last : undefined;
}

/**
 * The task's Dockerfile followed by one root step: the users agent (1000) and verifier (1001),
 * Harbor's folders, and the workdir owned by DENV_WORKDIR_OWNER (the agent in the agent's
 * image, the verifier in the verifier's image, which copies the submission back there).
 */
export function denvDockerfile(dockerfile: string, workdir: string, extraDirs: string[] = []): string {
  const users = [
    [AGENT_UID, "agent"],
    [VERIFIER_UID, "verifier"],
  ]
    .map(
      ([uid, name]) =>
        `getent passwd ${uid} >/dev/null 2>&1 || useradd -m -u ${uid} -U -s /bin/sh ${name} 2>/dev/null || { echo '${name}:x:${uid}:${uid}::/home/${name}:/bin/sh' >> /etc/passwd; echo '${name}:x:${uid}:' >> /etc/group; mkdir -p /home/${name}; chown ${uid}:${uid} /home/${name}; };`,
    )
    .join(" ");
  const w = [workdir, ...extraDirs].map((d) => `'${d.replace(/'/g, "'\\''")}'`).join(" ");
  return `${dockerfile.replace(/\n+$/, "")}

# Added by 'denv import harbor': users and Harbor's folders for a non-root agent and verifier.
USER root
ARG DENV_WORKDIR_OWNER=${AGENT_UID}
RUN set -e; ${users} mkdir -p ${w} /logs/agent /logs/artifacts /logs/verifier /tests /solution; chown -R \${DENV_WORKDIR_OWNER}:\${DENV_WORKDIR_OWNER} ${w}; chown -R ${AGENT_UID}:${AGENT_UID} /logs/agent /logs/artifacts /solution; chown ${VERIFIER_UID}:${VERIFIER_UID} /logs/verifier /tests; chmod 755 /logs /logs/verifier /tests
WORKDIR ${workdir}
`;
}

/**
 * The verifier's command: the submission put back where the agent left it (the workdir, or in
 * `separate` mode the task's artifacts: a folder's contents into the folder, a file as the
 * file), then Harbor's test.sh.
 */
export function verifierCommand(paths: string[]): string[] {
  const q = (p: string) => `'${p.replace(/'/g, "'\\''")}'`;
  const restore = paths.map((p) => {
    const sub = q(`/submission${p}`);
    return `if [ -d ${sub} ]; then mkdir -p ${q(p)} && cp -R --preserve=mode,timestamps ${sub}/. ${q(p)}/; elif [ -e ${sub} ]; then cp --preserve=mode,timestamps ${sub} ${q(p)}; fi;`;
  });
  return ["bash", "-c", `${restore.join(" ")} exec bash /tests/test.sh`];
}

/**
 * What a `separate` verifier receives of the agent's work: the task's `artifacts` (absolute
 * paths). Undefined for a `shared` verifier.
 */
function separateArtifacts(
  toml: Toml,
  tomlLabel: string,
  dir: string,
  dirLabel: string,
): string[] | undefined {
  const verifier = toml.verifier ?? {};
  const mode = verifier.environment_mode;
  if (mode !== undefined && mode !== "shared" && mode !== "separate") {
    throw new CliError(
      "invalid_request",
      M.unsupported(
        tomlLabel,
        "verifier.environment_mode",
        `'${String(mode)}' (expected "shared" or "separate")`,
      ),
    );
  }
  const ownEnvironment = toml["verifier.environment"] !== undefined;
  if (mode !== "separate" && !ownEnvironment) return undefined;
  if (ownEnvironment || existsSync(path.join(dir, "tests", "Dockerfile"))) {
    throw new CliError(
      "invalid_request",
      M.unsupported(
        ownEnvironment ? tomlLabel : `${dirLabel}/tests/Dockerfile`,
        ownEnvironment ? "verifier.environment" : "tests/Dockerfile",
        "a verifier environment of its own (denv's verifier is the task's image built again)",
      ),
    );
  }
  const artifacts = toml[""]?.artifacts ?? [];
  const paths = Array.isArray(artifacts) ? artifacts : [artifacts];
  for (const p of paths) {
    if (typeof p !== "string" || !p.startsWith("/") || p.split("/").includes("..")) {
      throw new CliError(
        "invalid_request",
        M.unsupported(
          tomlLabel,
          "artifacts",
          `${JSON.stringify(p)} (a separate verifier's artifacts must be absolute paths)`,
        ),
      );
    }
  }
  return (paths as string[]).map((p) => (p.length > 1 ? p.replace(/\/+$/, "") : p));
}

function need(file: string, label: string): string {
  if (!existsSync(file)) throw new CliError("invalid_request", M.missingFile(label));
  return file;
}

function asRecord(v: unknown): Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v) ? (v as Record<string, unknown>) : {};
}

function assertEmpty(dir: string, label: string): void {
  if (existsSync(dir) && readdirSync(dir).length > 0) throw new CliError("conflict", M.notEmpty(label));
}

export interface ImportResult {
  directory: string;
  project: string;
  workdir: string;
  services: string[];
  files: string[];
}

/** A denv project name from a task folder's name. */
export function projectFromDir(dir: string): string {
  const name = path
    .basename(path.resolve(dir))
    .toLowerCase()
    .replace(/[^a-z0-9-]+/g, "-");
  return (
    name
      .replace(/^-+|-+$/g, "")
      .slice(0, 40)
      .replace(/-+$/, "") || "harbor-task"
  );
}

/** Writes OUT, a denv project folder, from the Harbor task folder DIR. */
export function importHarborTask(
  dir: string,
  out: string,
  project: string,
  labels = { dir, out },
): ImportResult {
  const tomlFile = need(path.join(dir, "task.toml"), `${labels.dir}/task.toml`);
  need(path.join(dir, "instruction.md"), `${labels.dir}/instruction.md`);
  need(path.join(dir, "tests", "test.sh"), `${labels.dir}/tests/test.sh`);
  const tomlLabel = `${labels.dir}/task.toml`;
  const toml = parseToml(readFileSync(tomlFile, "utf8"), tomlLabel);
  const verifier = toml.verifier ?? {};
  const agent = toml.agent ?? {};
  const envCfg = toml.environment ?? {};
  const artifacts = separateArtifacts(toml, tomlLabel, dir, labels.dir);
  if (typeof envCfg.gpus === "number" && envCfg.gpus > 0) {
    throw new CliError(
      "invalid_request",
      M.unsupported(tomlLabel, "environment.gpus", "denv does not offer GPUs"),
    );
  }
  if (envCfg.network_mode === "allowlist") {
    throw new CliError(
      "invalid_request",
      M.unsupported(tomlLabel, "environment.network_mode", "'allowlist' (an rl-environment has no egress)"),
    );
  }
  if (agent.user !== undefined && /^(root|0)(:|$)/.test(String(agent.user))) {
    throw new CliError(
      "invalid_request",
      M.unsupported(
        tomlLabel,
        "agent.user",
        "root (the agent is never root on an rl-environment, protection 1)",
      ),
    );
  }
  const envDir = path.join(dir, "environment");
  const composeName = COMPOSE_NAMES.find((n) => existsSync(path.join(envDir, n)));
  const dockerImage = typeof envCfg.docker_image === "string" ? envCfg.docker_image : undefined;
  if (!composeName && !existsSync(path.join(envDir, "Dockerfile")) && !dockerImage) {
    throw new CliError("invalid_request", M.noEnvironment(labels.dir));
  }
  assertEmpty(out, labels.out);
  mkdirSync(out, { recursive: true });
  if (existsSync(envDir)) cpSync(envDir, path.join(out, "environment"), { recursive: true });
  else mkdirSync(path.join(out, "environment"));

  let services: Record<string, unknown> = {};
  let mainBuild: { context: string; dockerfile: string };
  let mainDockerfile: string;
  let composeTop: Record<string, unknown> = {};
  const workdirFromToml = typeof envCfg.workdir === "string" ? envCfg.workdir : undefined;
  if (composeName) {
    const label = `${labels.dir}/environment/${composeName}`;
    const doc = asRecord(YAML.parse(readFileSync(path.join(envDir, composeName), "utf8")));
    services = asRecord(doc.services);
    const main = asRecord(services.main);
    if (services.main === undefined)
      throw new CliError(
        "invalid_request",
        M.unsupported(label, "services.main", "missing; Harbor's agent service is 'main'"),
      );
    const { services: _s, name: _n, ...rest } = doc;
    composeTop = rest;
    // Build contexts are relative to environment/; the project root is OUT.
    for (const [name, svc] of Object.entries(services)) {
      const s = asRecord(svc);
      if (s.build === undefined) continue;
      const b = typeof s.build === "string" ? { context: s.build } : asRecord(s.build);
      const ctx = typeof b.context === "string" ? b.context : ".";
      if (path.isAbsolute(ctx) || ctx.includes("$")) {
        throw new CliError(
          "invalid_request",
          M.unsupported(
            label,
            `services.${name}.build.context`,
            `'${ctx}' is not a folder inside environment/`,
          ),
        );
      }
      s.build = { ...b, context: `./${path.posix.join("environment", ctx)}` };
    }
    if (main.build !== undefined) {
      const b = asRecord(main.build);
      const ctx = String(b.context);
      const df = typeof b.dockerfile === "string" ? b.dockerfile : "Dockerfile";
      const dfPath = path.join(out, ctx, df);
      if (!existsSync(dfPath))
        throw new CliError(
          "invalid_request",
          M.missingFile(`${labels.dir}/${path.posix.join(ctx.slice(2), df)}`),
        );
      mainBuild = { context: ctx, dockerfile: path.posix.join(path.posix.dirname(df), GENERATED_DOCKERFILE) };
      mainDockerfile = readFileSync(dfPath, "utf8");
    } else if (typeof main.image === "string") {
      mainBuild = { context: "./environment", dockerfile: GENERATED_DOCKERFILE };
      mainDockerfile = `FROM ${main.image}\n`;
      delete main.image;
    } else if (existsSync(path.join(envDir, "Dockerfile"))) {
      // Harbor builds main from environment/ when the task's compose file does not say.
      mainBuild = { context: "./environment", dockerfile: GENERATED_DOCKERFILE };
      mainDockerfile = readFileSync(path.join(envDir, "Dockerfile"), "utf8");
    } else {
      throw new CliError(
        "invalid_request",
        M.unsupported(label, "services.main", "has neither build nor image"),
      );
    }
    if (main.user !== undefined) delete main.user;
  } else {
    const df = path.join(envDir, "Dockerfile");
    mainDockerfile = existsSync(df) ? readFileSync(df, "utf8") : `FROM ${dockerImage}\n`;
    mainBuild = { context: "./environment", dockerfile: GENERATED_DOCKERFILE };
    services = { main: {} };
  }
  const workdir = workdirFromToml ?? dockerfileWorkdir(mainDockerfile) ?? DEFAULT_WORKDIR;
  // In separate mode the artifacts' folders exist in both images, owned by the image's user
  // (the agent writes them; the verifier puts them back from /submission).
  const artifactDirs = [...new Set((artifacts ?? []).map((p) => path.posix.dirname(p)))].filter(
    (d) => d !== "/" && d !== workdir,
  );
  writeFileSync(
    path.join(out, mainBuild.context, mainBuild.dockerfile),
    denvDockerfile(mainDockerfile, workdir, artifactDirs),
  );
  const main = asRecord(services.main);
  services.main = {
    ...main,
    build: mainBuild,
    command: main.command ?? ["sleep", "infinity"],
    init: main.init ?? true,
    working_dir: workdir,
  };
  const verifierEnv = asRecord(toml["verifier.env"]);
  const xDenv = {
    kind: "rl-environment",
    agent: { service: "main", user: AGENT_UID, workdir },
    verifier: {
      build: { ...mainBuild, args: { DENV_WORKDIR_OWNER: VERIFIER_UID } },
      user: VERIFIER_UID,
      command: verifierCommand(artifacts ?? [workdir]),
      timeout: typeof verifier.timeout_sec === "number" ? Math.ceil(verifier.timeout_sec) : 600,
      tests: "./tests",
      submission: artifacts ?? [workdir],
      ...(Object.keys(verifierEnv).length > 0
        ? { environment: Object.fromEntries(Object.entries(verifierEnv).map(([k, v]) => [k, String(v)])) }
        : {}),
    },
  };
  const compose = { name: project, services, ...composeTop, "x-denv": xDenv };
  writeFileSync(
    path.join(out, "compose.yaml"),
    `# Written by 'denv import harbor' from ${path.basename(path.resolve(dir))}: the agent works in 'main' as uid ${AGENT_UID};\n# the verifier is the task's image built again (workdir owned by uid ${VERIFIER_UID}), which puts the\n# agent's workdir back and runs Harbor's tests/test.sh; the reward is /logs/verifier/reward.txt|json.\n${YAML.stringify(compose)}`,
  );
  cpSync(path.join(dir, "tests"), path.join(out, "tests"), { recursive: true });
  if (existsSync(path.join(dir, "solution")))
    cpSync(path.join(dir, "solution"), path.join(out, "solution"), { recursive: true });
  cpSync(path.join(dir, "instruction.md"), path.join(out, "instruction.md"));
  cpSync(tomlFile, path.join(out, "task.toml"));
  return {
    directory: out,
    project,
    workdir,
    services: Object.keys(services),
    files: readdirSync(out).sort(),
  };
}

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
  return { services: result, ...(doc.volumes !== undefined ? { volumes: doc.volumes } : {}) };
}

export const isDir = (p: string) => existsSync(p) && statSync(p).isDirectory();
