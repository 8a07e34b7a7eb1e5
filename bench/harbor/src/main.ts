import { cpSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { cpus, release, tmpdir, totalmem } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { type Stack, startStack } from "../../../packages/cli/dist/e2e/stack.js";
import { readArgs } from "../../runtime/dist/args.js";
import { log, run } from "../../runtime/dist/host.js";
import {
  median,
  printFooter,
  type Row,
  ratioOf,
  round,
  table,
  verdict,
  writeResults,
} from "../../runtime/dist/stats.js";

/**
 * Trials per minute of Harbor's oracle agent on the example tasks, through Harbor's own docker
 * backend and through denv (`--env denv.harbor:DenvEnvironment`), same tasks, same trial count,
 * same concurrency, same run. Harbor runs in the tools image (deploy/tools-image), as in the
 * e2e test. See bench/README.md, section bench/harbor.
 */

const USAGE = `usage: node bench/harbor/run.mjs [--smoke] [--trials N] [--concurrency N] [--only harbor-hello,harbor-shop,harbor-rootfix]

  --smoke          harbor-hello, no warm-up, 1 trial per backend, concurrency 1 (about a minute)
  --trials N       measured trials per task and backend (default 8)
  --concurrency N  trials in flight (harbor run -n; default 2)
  --only LIST      run only these tasks (examples/<task>; default: all, harbor-hello with
                   --smoke)
  --pool N         denv's measured trials claim warm forks: the task's project gets a warm
                   pool of N (denv pools set) after the warm-up, emptied after the job (default 0)
  --agent-sandbox gvisor|none
                   denv.harbor's agent_sandbox: the agent as root inside gVisor (default, as
                   Harbor runs agents) or as uid 1000 without it (for tasks that need no root)
  Needs root, a running Docker engine (scripts/setup-host) and npm ci done.`;

const IMAGE = "denv-tools:trixie";
const TASKS = ["harbor-hello", "harbor-shop", "harbor-rootfix"] as const;
/**
 * What --smoke runs: the task whose trials cost least, since the smoke only keeps the benchmark's
 * code from rotting (harbor-shop loads 6M rows per build and per trial, harbor-rootfix fetches
 * from the package mirrors in every trial; every task takes the same code path).
 */
const SMOKE_TASKS: Task[] = ["harbor-hello"];
type Task = (typeof TASKS)[number];
/** The speedup denv must reach on the task with a real setup cost. */
const TARGET: Partial<Record<Task, number>> = { "harbor-shop": 3 };
type Backend = "docker" | "denv";

interface Config {
  smoke: boolean;
  trials: number;
  concurrency: number;
  tasks: Task[];
  pool: number;
  agentSandbox: "gvisor" | "none";
}

function parseArgs(argv: string[]): Config {
  const c: Config = {
    smoke: false,
    trials: 8,
    concurrency: 2,
    tasks: [...TASKS],
    pool: 0,
    agentSandbox: "gvisor",
  };
  readArgs(argv, USAGE, (arg, r) => {
    if (arg === "--smoke")
      Object.assign(c, { smoke: true, trials: 1, concurrency: 1, tasks: [...SMOKE_TASKS] });
    else if (arg === "--trials") c.trials = r.count();
    else if (arg === "--concurrency") c.concurrency = r.count();
    else if (arg === "--only") c.tasks = r.oneOf(TASKS, "task");
    else if (arg === "--pool") c.pool = r.count();
    else if (arg === "--agent-sandbox") {
      const [mode, ...more] = r.oneOf(["gvisor", "none"] as const, "agent sandbox");
      if (!mode || more.length > 0) throw new Error("--agent-sandbox takes one of gvisor, none");
      c.agentSandbox = mode;
    } else return false;
    return true;
  });
  return c;
}

/** denv's project of a task's trials. */
const projectOf = (task: Task) => `bench-${task}`;

/** Sets a project's warm pool and waits until it holds that many ready forks (or none). */
async function setPool(stack: Stack, project: string, size: number): Promise<void> {
  const set = await stack.denv(["pools", "set", project, String(size), "--wait"], { timeoutMs: 660_000 });
  if (set.code !== 0) throw new Error(`denv pools set ${project} ${size}: ${set.stderr}`);
  log(`${project}: warm pool of ${size}`);
}

/** One `harbor run` job, read back from Harbor's own result files. */
interface Job {
  backend: Backend;
  agent: string;
  task: Task;
  trials: number;
  /** Seconds from the job's start to its end (Harbor's result.json). */
  seconds: number;
  trialsPerMinute: number;
  rewards: number[];
  failures: string[];
  /** Harbor's environment_setup phase of each trial (start of the environment), seconds. */
  setupSeconds: number[];
  /** Each of Harbor's trial phases (and the whole trial), seconds per trial: where the time goes. */
  phaseSeconds: Record<Phase, number[]>;
}

/**
 * Harbor's trial phases as its trial result.json times them, the whole trial, and the rest: the
 * trial less its four phases (the environment's stop and removal, mostly).
 */
const PHASES = ["environment_setup", "agent_setup", "agent_execution", "verifier", "trial", "rest"] as const;
type Phase = (typeof PHASES)[number];
type Timed = { started_at: string; finished_at: string } | null | undefined;

interface TrialResult {
  verifier_result: { rewards: Record<string, number> } | null;
  exception_info: { exception_type?: string; exception_message?: string } | null;
  started_at: string;
  finished_at: string;
  environment_setup: Timed;
  agent_setup: Timed;
  agent_execution: Timed;
  verifier: Timed;
}

const seconds = (from: string, to: string) => (Date.parse(to) - Date.parse(from)) / 1000;

async function main(): Promise<number> {
  const cfg = parseArgs(process.argv.slice(2));
  const repo = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
  if (process.getuid?.() !== 0) throw new Error("run as root: denvd's volume store mounts a btrfs loop file");
  const engine = await run("docker", ["version", "-f", "{{.Server.Version}}"]);
  if (engine.code !== 0)
    throw new Error("the Docker engine does not answer: start it with scripts/setup-host");
  const machine = {
    cpus: cpus().length,
    memGiB: round(totalmem() / 1024 ** 3, 1),
    kernel: release(),
    node: process.version,
    docker: engine.stdout.trim(),
  };
  log(`bench/harbor (${cfg.smoke ? "smoke" : "full"}), ${machine.cpus} CPUs, docker ${machine.docker}`);

  const built = await run(join(repo, "deploy/tools-image"), ["--tag", IMAGE], { timeoutMs: 1_800_000 });
  if (built.code !== 0) throw new Error(`deploy/tools-image failed: ${built.stderr}`);

  const others = async () =>
    (await run("docker", ["ps", "--format", "{{.Names}}"])).stdout.split("\n").filter(Boolean);
  const concurrent = { atStart: await others(), atEnd: [] as string[] };
  const hbBefore = new Set(await hbImages());
  const work = await mkdtemp(join(tmpdir(), "denv-bench-harbor-"));
  const problems: string[] = [];
  const jobs: Job[] = [];
  let failure: Error | undefined;
  let stack: Stack | undefined;
  const startedAt = new Date();
  try {
    log("starting a denv (denv up: control plane + denvd)");
    stack = await startStack();
    const live = stack;
    // The docker backend runs a copy with network_mode = "public": its "no-network" needs an
    // egress-control sidecar whose kernel support this machine lacks (docs/how-to/harbor.md).
    // That only spares it the sidecar; denv runs the tasks as written.
    for (const task of cfg.tasks) {
      for (const backend of ["denv", "docker"] as const) {
        const dir = join(work, backend, task);
        cpSync(join(repo, "examples", task), dir, { recursive: true });
        if (backend === "docker") {
          const toml = join(dir, "task.toml");
          const text = readFileSync(toml, "utf8").replace(/^network_mode = .*$/m, "");
          writeFileSync(toml, text.replace("[environment]\n", '[environment]\nnetwork_mode = "public"\n'));
        }
      }
    }
    mkdirSync(join(work, "jobs"));
    const harbor = async (
      task: Task,
      backend: Backend,
      job: string,
      trials: number,
      concurrency: number,
      agent = "oracle",
    ) => {
      const args = [
        "run",
        "--rm",
        "--label",
        "ai.denv.bench=harbor",
        "--network",
        "host",
        "-v",
        "/var/run/docker.sock:/var/run/docker.sock",
        "-v",
        `${work}:${work}`,
        "-e",
        `DENV_URL=${live.url}`,
        "-e",
        `DENV_TOKEN=${live.token}`,
        IMAGE,
        "harbor",
        "run",
        "--path",
        join(work, backend, task),
        "--agent",
        agent,
        // --no-delete for the docker backend: `docker compose down` keeps the images, so each
        // trial builds from the layer cache instead of building `db` from scratch (the default
        // --delete removes compose-built images with --rmi local). The fastest Harbor offers.
        // denv's project is named, so that --pool can give it a warm pool.
        ...(backend === "denv"
          ? [
              "--env",
              "denv.harbor:DenvEnvironment",
              "--ek",
              `project=${projectOf(task)}`,
              "--ek",
              `agent_sandbox=${cfg.agentSandbox}`,
            ]
          : ["--no-delete"]),
        "--jobs-dir",
        join(work, "jobs"),
        "--job-name",
        job,
        "-k",
        String(trials),
        "-n",
        String(concurrency),
      ];
      const r = await run("docker", args, { timeoutMs: 3_600_000 });
      if (backend === "docker") await removeComposeLeftovers(task, problems);
      if (r.code !== 0) throw new Error(`harbor run ${job} exited ${r.code}: ${r.stderr.slice(-2000)}`);
      return readJob(join(work, "jobs", job), task, backend, agent);
    };

    for (const task of cfg.tasks) {
      // Warm-up, not measured: denv deploys the task once, Docker builds its images once. The
      // smoke skips it: its one trial per backend measures nothing, it only runs the code.
      for (const backend of cfg.smoke ? [] : (["denv", "docker"] as const)) {
        log(`${task}: warm-up trial on ${backend}`);
        const warm = await harbor(task, backend, `${task}-${backend}-warmup`, 1, 1);
        if (warm.failures.length > 0) throw new Error(`${task} warm-up on ${backend}: ${warm.failures[0]}`);
      }
      // Measured: alternate which backend goes first per task.
      const order: Backend[] = jobs.length % 4 === 0 ? ["docker", "denv"] : ["denv", "docker"];
      for (const backend of order) {
        if (backend === "denv" && cfg.pool > 0) await setPool(live, projectOf(task), cfg.pool);
        log(`${task}: ${cfg.trials} trials on ${backend}, ${cfg.concurrency} at a time`);
        const job = await harbor(task, backend, `${task}-${backend}`, cfg.trials, cfg.concurrency);
        if (backend === "denv" && cfg.pool > 0) await setPool(live, projectOf(task), 0);
        log(
          `${task} on ${backend}: ${job.trialsPerMinute.toFixed(1)} trials/min (${job.seconds.toFixed(1)} s)`,
        );
        jobs.push(job);
      }
      // The do-nothing agent: the task's tests must fail it on both backends.
      for (const backend of ["denv", "docker"] as const) {
        log(`${task}: one nop trial on ${backend}`);
        jobs.push(await harbor(task, backend, `${task}-${backend}-nop`, 1, 1, "nop"));
      }
    }
  } catch (err) {
    failure = err as Error;
  } finally {
    if (stack) await stack.close().catch((err: Error) => problems.push(`stack close: ${err.message}`));
    for (const task of cfg.tasks) await removeComposeLeftovers(task, problems);
    for (const image of await hbImages()) {
      if (hbBefore.has(image)) continue;
      const r = await run("docker", ["rmi", "-f", image]);
      if (r.code !== 0) problems.push(`docker rmi ${image}: ${r.stderr.trim()}`);
    }
    await rm(work, { recursive: true, force: true });
    concurrent.atEnd = (await others()).filter((n) => !concurrent.atStart.includes(n));
  }

  const rows: Row[] = [];
  for (const task of cfg.tasks) {
    const denv = jobs.find((j) => j.task === task && j.backend === "denv" && j.agent === "oracle");
    const docker = jobs.find((j) => j.task === task && j.backend === "docker" && j.agent === "oracle");
    if (!denv || !docker) continue;
    const target = TARGET[task];
    const throughput: Row = {
      name: `${task}: oracle trials/min`,
      denv: denv.trialsPerMinute,
      baseline: docker.trialsPerMinute,
      baselineName: "Harbor docker backend",
      unit: "trials/min",
      ratioKind: "throughput",
      verdict: "info",
    };
    throughput.ratio = ratioOf(throughput);
    if (target !== undefined) {
      throughput.target = `>= ${target}x`;
      throughput.verdict = verdict((throughput.ratio ?? 0) >= target);
    }
    const bad = [...denv.failures, ...docker.failures];
    const rewards = [...denv.rewards, ...docker.rewards];
    if (bad.length > 0 || rewards.some((r) => r !== 1)) {
      throughput.verdict = "MISS";
      throughput.note = `not every trial got reward 1.0: ${bad.join("; ") || rewards.join(", ")}`;
    }
    rows.push(throughput, {
      name: `${task}: environment setup per trial (median)`,
      denv: median(denv.setupSeconds),
      baseline: median(docker.setupSeconds),
      baselineName: "Harbor docker backend",
      unit: "s",
      ratioKind: "baseline/denv",
      ratio: median(docker.setupSeconds) / median(denv.setupSeconds),
      verdict: "info",
    });
    // Where a trial's time goes on each backend (environment_setup is the row above).
    for (const phase of PHASES.filter((p) => p !== "environment_setup")) {
      const d = median(denv.phaseSeconds[phase]);
      const b = median(docker.phaseSeconds[phase]);
      rows.push({
        name: `${task}: ${phase === "trial" ? "whole trial" : phase === "rest" ? "outside the phases" : phase} (median)`,
        denv: d,
        baseline: b,
        baselineName: "Harbor docker backend",
        unit: "s",
        ratioKind: "baseline/denv",
        ratio: b / d,
        verdict: "info",
      });
    }
  }
  console.log(table(rows));
  console.log(rewardsTable(cfg.tasks, jobs));
  const file = await writeResults(repo, "harbor", startedAt, { machine, config: cfg, jobs, rows, problems });
  return printFooter({ file, concurrent, problems, failure });
}

/**
 * The rewards each backend gave each agent on each task (parity: the same on both, oracle 1.0
 * and nop 0.0), one line per task.
 */
function rewardsTable(tasks: Task[], jobs: Job[]): string {
  const cell = (task: Task, backend: Backend, agent: string) => {
    const rewards = jobs.find((j) => j.task === task && j.backend === backend && j.agent === agent)?.rewards;
    return rewards && rewards.length > 0 ? [...new Set(rewards.map((r) => r.toFixed(1)))].join("/") : "-";
  };
  const lines = ["rewards: task | Harbor docker backend oracle, nop | denv oracle, nop | parity"];
  for (const task of tasks) {
    const docker = [cell(task, "docker", "oracle"), cell(task, "docker", "nop")];
    const denv = [cell(task, "denv", "oracle"), cell(task, "denv", "nop")];
    const same = docker.join() === denv.join() && docker.join() === "1.0,0.0";
    lines.push(
      `rewards: ${task} | ${docker.join(", ")} | ${denv.join(", ")} | ${same ? "same" : "DIFFERENT"}`,
    );
  }
  return lines.join("\n");
}

function readJob(dir: string, task: Task, backend: Backend, agent: string): Job {
  const job = JSON.parse(readFileSync(join(dir, "result.json"), "utf8")) as {
    started_at: string;
    finished_at: string;
  };
  const trials = readdirSync(dir, { withFileTypes: true })
    .filter((d) => d.isDirectory())
    .map((d) => JSON.parse(readFileSync(join(dir, d.name, "result.json"), "utf8")) as TrialResult);
  const s = seconds(job.started_at, job.finished_at);
  return {
    backend,
    agent,
    task,
    trials: trials.length,
    seconds: s,
    trialsPerMinute: (trials.length * 60) / s,
    rewards: trials.map((t) => t.verifier_result?.rewards.reward ?? Number.NaN),
    failures: trials
      .filter((t) => t.exception_info)
      .map((t) => `${t.exception_info?.exception_type}: ${t.exception_info?.exception_message}`),
    setupSeconds: trials
      .filter((t) => t.environment_setup)
      .map((t) => seconds(t.environment_setup?.started_at ?? "", t.environment_setup?.finished_at ?? "")),
    phaseSeconds: Object.fromEntries(
      PHASES.map((p) => [p, trials.map((t) => phaseOf(t, p)).filter((x) => !Number.isNaN(x))]),
    ) as Record<Phase, number[]>,
  };
}

function phaseOf(t: TrialResult, p: Phase): number {
  const span = (x: Timed) => (x ? seconds(x.started_at, x.finished_at) : Number.NaN);
  if (p === "trial") return span(t);
  if (p !== "rest") return span(t[p]);
  const parts = [t.environment_setup, t.agent_setup, t.agent_execution, t.verifier].map((x) =>
    x ? span(x) : 0,
  );
  return span(t) - parts.reduce((a, b) => a + b, 0);
}

/** Images Harbor's docker backend tags for a task's main service (`hb__<content hash>`). */
async function hbImages(): Promise<string[]> {
  const r = await run("docker", ["images", "--format", "{{.Repository}}:{{.Tag}}"]);
  return r.stdout.split("\n").filter((n) => n.startsWith("hb__"));
}

/** What `docker compose` made for the docker backend's trials of a task (projects named after
 * the trials, `<task>__<id>`): containers, networks, volumes and the images it built. */
async function removeComposeLeftovers(task: Task, problems: string[]): Promise<void> {
  const prefix = `${task}__`.toLowerCase();
  const kinds: Array<[string[], string, string[]]> = [
    [["ps", "-a"], "{{.ID}}", ["rm", "-f"]],
    [["network", "ls"], "{{.Name}}", ["network", "rm"]],
    [["volume", "ls"], "{{.Name}}", ["volume", "rm", "-f"]],
  ];
  const remove = async (cmd: string[], ids: string[]) => {
    for (const id of new Set(ids)) {
      const out = await run("docker", [...cmd, id]);
      if (out.code !== 0) problems.push(`docker ${cmd.join(" ")} ${id}: ${out.stderr.trim()}`);
    }
  };
  for (const [list, field, cmd] of kinds) {
    const r = await run("docker", [
      ...list,
      "--filter",
      "label=com.docker.compose.project",
      "--format",
      `${field} {{.Label "com.docker.compose.project"}}`,
    ]);
    const rows = r.stdout.split("\n").map((l) => l.split(" "));
    await remove(
      cmd,
      rows.filter(([, project]) => project?.startsWith(prefix)).map(([id]) => id as string),
    );
  }
  // Compose names the images it builds `<project>-<service>`.
  const images = await run("docker", ["images", "--format", "{{.Repository}}:{{.Tag}}"]);
  await remove(
    ["rmi", "-f"],
    images.stdout.split("\n").filter((name) => name.startsWith(prefix)),
  );
}

main().then(
  (code) => process.exit(code),
  (err: Error) => {
    console.error(`bench/harbor: ${err.message}`);
    process.exit(1);
  },
);
