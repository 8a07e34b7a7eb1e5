import { spawnSync } from "node:child_process";
import path from "node:path";
import type { CommandSpec, GroupSpec } from "../command.js";
import type { Context } from "../context.js";
import { CliError } from "../exit-codes.js";
import { fields } from "../format.js";
import { isDir } from "../harbor-task.js";

/** What `python -m denv.harbor._import --json` prints. */
export interface ImportResult {
  directory: string;
  project: string;
  workdir: string;
  services: string[];
  files: string[];
  /** What merging the task's compose file over Harbor's base mapped or dropped. */
  notes: string[];
}

/** The module that maps a Harbor task to a denv project (python/src/denv/harbor/_import.py). */
export const HARBOR_IMPORTER = "denv.harbor._import";

/** `denv import KIND` when DENV_PYTHON cannot import the importer MODULE. */
const missingImporter = (kind: string, module: string) => (python: string) =>
  `denv import ${kind} needs the denv Python package: ${python} cannot import ${module}; install it ('pip install ./python' from a denv checkout) or set DENV_PYTHON to a Python that has it`;

export const missingDenvPython = missingImporter("harbor", HARBOR_IMPORTER);

/** The module that maps a Karotte environment to a denv project (python/src/denv/karotte/_import.py). */
export const KAROTTE_IMPORTER = "denv.karotte._import";

/** What `python -m denv.karotte._import --json` prints. */
export interface KarotteImportResult {
  directory: string;
  project: string;
  workdir: string;
  student_uid: number;
  services: string[];
  files: string[];
  notes: string[];
}

export const missingKarottePython = missingImporter("karotte", KAROTTE_IMPORTER);

/**
 * Runs a denv Python package importer module with DENV_PYTHON (default python3) in CWD. Its
 * refusal (exit 2, 3 for a non-empty OUT: one line on stderr) becomes the CLI's error.
 */
function runImporter<T>(
  module: string,
  missing: (python: string) => string,
  args: string[],
  io: { cwd: string; env: NodeJS.ProcessEnv },
): T {
  const python = io.env.DENV_PYTHON || "python3";
  const run = spawnSync(python, ["-m", module, "--json", ...args], {
    cwd: io.cwd,
    env: io.env,
    encoding: "utf8",
  });
  const stderr = (run.stderr ?? "").trim();
  if (run.error !== undefined || /No module named '?denv/.test(stderr)) {
    throw new CliError("invalid_request", missing(python));
  }
  if (run.status === 2 || run.status === 3) {
    const line = stderr.split("\n").at(-1) ?? "";
    throw new CliError(run.status === 3 ? "conflict" : "invalid_request", line);
  }
  if (run.status !== 0) {
    throw new CliError("internal", `${python} -m ${module} failed (exit ${run.status}): ${stderr}`);
  }
  return JSON.parse(run.stdout) as T;
}

/**
 * Runs the one Harbor task -> denv project mapping, denv.harbor's (the Harbor adapter's), with
 * DENV_PYTHON (default python3) in CWD.
 */
export function runHarborImporter(args: string[], io: { cwd: string; env: NodeJS.ProcessEnv }): ImportResult {
  return runImporter<ImportResult>(HARBOR_IMPORTER, missingDenvPython, args, io);
}

/** Runs the Karotte environment -> denv project mapping (denv.karotte) with DENV_PYTHON in CWD. */
export function runKarotteImporter(
  args: string[],
  io: { cwd: string; env: NodeJS.ProcessEnv },
): KarotteImportResult {
  return runImporter<KarotteImportResult>(KAROTTE_IMPORTER, missingKarottePython, args, io);
}

/** The flags every `denv import KIND` takes. */
const OUT_AND_PROJECT = {
  out: { type: "string", value: "OUT", description: "the project folder to write (default DIR-denv)" },
  project: {
    type: "string",
    value: "P",
    description: "the compose name, the project 'denv deploy OUT' uses (default: DIR's name)",
  },
} as const;

/**
 * What every `denv import KIND DIR` does: DIR checked, OUT (default DIR-denv), --project, one
 * flag of `choices` (the first is the default), the importer run on them, and its result printed
 * (directory and project, then `fields`, then files and the deploy to run next).
 */
function runImport<R extends { directory: string; project: string; files: string[] }>(
  ctx: Context,
  o: {
    flag: string;
    choices: readonly string[];
    importer: (args: string[], io: { cwd: string; env: NodeJS.ProcessEnv }) => R;
    fields: (r: R) => Array<[string, string]>;
  },
): number {
  const [dir = ""] = ctx.args(1, 1, "DIR");
  if (!isDir(path.resolve(ctx.io.cwd, dir))) throw ctx.usage(`${dir} is not a folder`);
  const trimmed = dir.replace(/\/+$/, "");
  const outArg = ctx.string("out") ?? `${trimmed}-denv`;
  const project = ctx.string("project");
  const value = ctx.string(o.flag) ?? (o.choices[0] as string);
  if (!o.choices.includes(value)) {
    throw ctx.usage(`--${o.flag} ${value}: expected ${o.choices.join(" or ")}`);
  }
  const r = o.importer(
    [
      `--${o.flag}`,
      value,
      ...(project === undefined ? [] : ["--project", project]),
      "--",
      trimmed || "/",
      outArg,
    ],
    ctx.io,
  );
  ctx.print(r, () =>
    fields([
      ["directory", r.directory],
      ["project", r.project],
      ...o.fields(r),
      ["files", r.files.join(" ")],
      ["next", `denv deploy ${outArg}`],
    ]),
  );
  return 0;
}

/** `denv import harbor DIR`: a denv project folder from a Harbor task folder (no control plane). */
const harbor: CommandSpec = {
  name: "import harbor",
  summary: "write a denv project folder from a Harbor task folder",
  args: "DIR [--out OUT] [--project P] [--agent-sandbox gvisor|none]",
  description: `
Reads DIR/task.toml, DIR/instruction.md, DIR/environment (a Dockerfile, a docker-compose.yaml with
service main, or [environment] docker_image), DIR/tests/test.sh and DIR/solution, and writes OUT
(default DIR-denv; missing or empty): compose.yaml with x-denv (agent: service main in the task's
workdir, root in gVisor's kernel as Harbor's agent is root, or uid 1000 with --agent-sandbox none;
egress: the task's network_mode, public as the host's package mirrors through denvd's proxy;
verifier: the task's image built again, root unless [verifier] user says otherwise, which copies the
agent's work back from /submission and runs bash /tests/test.sh), the environment
folder with a generated Dockerfile.denv, tests/, solution/, instruction.md and task.toml. Deploy OUT
with 'denv deploy OUT' and grade an episode with 'denv verify'. What cannot be mapped is refused in one
line naming the file and the key. The mapping is the denv Python package's (denv.harbor, the Harbor
adapter's): it runs with DENV_PYTHON (default python3), which needs the package ('pip install ./python'
from a denv checkout).`,
  flags: {
    ...OUT_AND_PROJECT,
    "agent-sandbox": {
      type: "string",
      value: "S",
      description: "gvisor (default: the agent is root inside gVisor) or none (the agent is uid 1000)",
    },
  },
  remote: false,
  async run(ctx) {
    return runImport(ctx, {
      flag: "agent-sandbox",
      choices: ["gvisor", "none"],
      importer: runHarborImporter,
      fields: (r) => [
        ["services", r.services.join(" ")],
        ["workdir", r.workdir],
      ],
    });
  },
};

/** `denv import karotte DIR`: a denv project folder from a Karotte environment folder. */
const karotte: CommandSpec = {
  name: "import karotte",
  summary: "write a denv project folder from a Karotte environment folder",
  args: "DIR [--out OUT] [--project P] [--answer-key image|verifier]",
  description: `
Reads a Karotte environment (what 'karotte create-env' writes): DIR/pyproject.toml (the package
'environment'), DIR/Containerfile (the run's one image; its ENV KAROTTE_DEMOTE_ID is the student's
uid, KAROTTE_WORKDIR the student's folder) and DIR/src/environment, and writes OUT (default DIR-denv;
missing or empty): DIR's files, compose.yaml with x-denv (service main: the image, where
'karotte run --no-containerized' runs as root inside gVisor's kernel and demotes the student; egress
deny; Karotte's default caps: 4 GiB, 2 CPUs, 4096 pids; verifier: the same image built again, root
in its own container, which re-runs the task's Karotte judges over the run's /out) and
denv-verifier/grade.py. With --answer-key verifier, main builds from a generated Containerfile.denv
(the environment's, then /root_data and /intermediate_data emptied): the answer key is only in the
verifier's image, and Karotte's own in-run grading cannot read it. What cannot be mapped (BuildKit-only Containerfile steps, CLI agents that
need a model provider's network, a package not named 'environment') is refused in one line naming
the file and the key. The mapping is the denv Python package's (denv.karotte): it runs with
DENV_PYTHON (default python3), which needs the package ('pip install ./python' from a denv checkout).`,
  flags: {
    ...OUT_AND_PROJECT,
    "answer-key": {
      type: "string",
      value: "K",
      description:
        "image (default: root-only in the run's image, as Karotte keeps it) or verifier (only the verifier's)",
    },
  },
  remote: false,
  async run(ctx) {
    return runImport(ctx, {
      flag: "answer-key",
      choices: ["image", "verifier"],
      importer: runKarotteImporter,
      fields: (r) => [
        ["workdir", r.workdir],
        ["student", String(r.student_uid)],
      ],
    });
  },
};

export const importCmd: GroupSpec = {
  name: "import",
  summary: "import a task from another framework as a denv project folder",
  subcommands: [harbor, karotte],
};
