import { cpSync, existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { isRootUser, HarborTaskMessages as M } from "@denv/spec";
import YAML from "yaml";
import { denvDockerfile, dockerfileWorkdir, GENERATED_DOCKERFILE } from "./denv-dockerfile.js";
import { CliError } from "./exit-codes.js";
import { AGENT_UID, asRecord, assertEmpty, DEFAULT_WORKDIR, need, VERIFIER_UID } from "./harbor-task.js";
import { isMap, mergeHarborCompose } from "./merge-harbor-compose.js";
import { parseToml, type Toml } from "./parse-toml.js";

const COMPOSE_NAMES = ["docker-compose.yaml", "docker-compose.yml", "compose.yaml", "compose.yml"];

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

export interface ImportResult {
  directory: string;
  project: string;
  workdir: string;
  services: string[];
  files: string[];
  /** What merging the task's compose file over Harbor's base mapped or dropped. */
  notes: string[];
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

/** How the agent is confined: root in gVisor as in Harbor (default), or uid 1000. */
export type AgentSandboxChoice = "gvisor" | "none";

/**
 * Harbor's network_mode of a phase ([agent] or [verifier] over [environment]; Harbor's default
 * is public) as denv's egress: public -> the host's package mirrors through denvd's proxy,
 * no-network -> deny; allowlist is refused (denv reaches no host but the mirrors).
 */
function phaseEgress(toml: Toml, phase: "agent" | "verifier", tomlLabel: string): "deny" | "mirrors" {
  const own = toml[phase]?.network_mode;
  const mode = own ?? toml.environment?.network_mode ?? "public";
  if (mode === "no-network") return "deny";
  if (mode === "public") return "mirrors";
  throw new CliError(
    "invalid_request",
    M.unsupported(
      tomlLabel,
      own !== undefined ? `${phase}.network_mode` : "environment.network_mode",
      mode === "allowlist"
        ? "'allowlist' (an rl-environment reaches no host but the package mirrors)"
        : `'${String(mode)}' (expected "public" or "no-network")`,
    ),
  );
}

/** Writes OUT, a denv project folder, from the Harbor task folder DIR. */
export function importHarborTask(
  dir: string,
  out: string,
  project: string,
  labels = { dir, out },
  opts: { agentSandbox?: AgentSandboxChoice } = {},
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
  const agentEgress = phaseEgress(toml, "agent", tomlLabel);
  const verifierEgress = phaseEgress(toml, "verifier", tomlLabel);
  // Harbor's agent is the image's user, root in nearly every task: root in gVisor's kernel here
  // (x-denv.agent.sandbox), unless the import is asked for a non-root agent.
  const sandboxed = (opts.agentSandbox ?? "gvisor") === "gvisor";
  const askedUser = agent.user === undefined ? undefined : String(agent.user);
  if (askedUser !== undefined && isRootUser(askedUser) && !sandboxed) {
    throw new CliError(
      "invalid_request",
      M.unsupported(
        tomlLabel,
        "agent.user",
        "root without --agent-sandbox gvisor (the agent is never root outside a sandbox, protection 1)",
      ),
    );
  }
  const agentUser = askedUser ?? (sandboxed ? "root" : AGENT_UID);
  const rootAgent = isRootUser(agentUser);
  const verifierUser =
    verifier.user !== undefined ? String(verifier.user) : rootAgent ? "root" : VERIFIER_UID;
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
  let notes: string[] = [];
  const workdirFromToml = typeof envCfg.workdir === "string" ? envCfg.workdir : undefined;
  if (composeName) {
    const label = `${labels.dir}/environment/${composeName}`;
    const parsed: unknown = YAML.parse(readFileSync(path.join(envDir, composeName), "utf8"));
    if (!isMap(parsed))
      throw new CliError("invalid_request", M.unsupported(label, "services", "expected a compose mapping"));
    // Harbor runs the task's compose file merged over its own base, which gives `main` its build.
    const merged = mergeHarborCompose(parsed, {
      hasDockerfile: existsSync(path.join(envDir, "Dockerfile")),
      dockerImage,
      cpus: typeof envCfg.cpus === "number" ? envCfg.cpus : undefined,
      memoryMb: typeof envCfg.memory_mb === "number" ? envCfg.memory_mb : undefined,
    });
    notes = merged.notes;
    services = asRecord(merged.document.services);
    const main = asRecord(services.main);
    const { services: _s, ...rest } = merged.document;
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
    denvDockerfile(mainDockerfile, workdir, artifactDirs, { root: rootAgent }),
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
    agent: { service: "main", user: agentUser, workdir, ...(rootAgent ? { sandbox: "gvisor" } : {}) },
    egress: agentEgress,
    verifier: {
      build: rootAgent ? mainBuild : { ...mainBuild, args: { DENV_WORKDIR_OWNER: verifierUser } },
      user: verifierUser,
      egress: verifierEgress,
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
    `# Written by 'denv import harbor' from ${path.basename(path.resolve(dir))}: the agent works in 'main' as ${rootAgent ? "root in gVisor's kernel" : `uid ${agentUser}`};\n# the verifier (${verifierUser}) is the task's image built again, which puts the agent's work back and runs\n# Harbor's tests/test.sh; the reward is /logs/verifier/reward.txt|json. Egress: agent ${agentEgress}, verifier ${verifierEgress}.\n${notes.map((n) => `# Merged over Harbor's base compose: ${n}\n`).join("")}${YAML.stringify(compose)}`,
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
    notes,
  };
}
