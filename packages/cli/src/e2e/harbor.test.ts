import { cpSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { HarborTaskMessages } from "@denv/spec";
import { afterAll, beforeAll, expect, it } from "vitest";
import { ensureToolsImage, imagesAdded, repo, run, type Stack, startStack, TOOLS_IMAGE } from "./stack.js";

/**
 * Harbor on denv: `harbor run` (inside the tools image: Python 3.13, Harbor pinned in
 * deploy/tools-image) with `--env denv.harbor:DenvEnvironment` against a live stack, on
 * examples/harbor-hello. The rewards are read from Harbor's own trial result files; the kinds of
 * the control plane's deployments show that the second trial forked the deployed version
 * instead of building again, and that each verifier ran on a fork of a snapshot.
 */
const PROJECT = "harbor-harbor-hello";

let stack: Stack;
let jobsDir: string;
/** Harbor's docker backend tags its `main` images `hb__<content hash>`; the ones this file adds go. */
let hbImages: Awaited<ReturnType<typeof imagesAdded>> | undefined;

beforeAll(async () => {
  await ensureToolsImage();
  hbImages = await imagesAdded((n) => n.startsWith("hb__"));
  stack = await startStack();
  jobsDir = mkdtempSync(path.join(os.tmpdir(), "denv-harbor-jobs-"));
}, 1_800_000);

afterAll(async () => {
  await stack?.close();
  await hbImages?.remove();
  if (jobsDir) rmSync(jobsDir, { recursive: true, force: true });
}, 180_000);

interface TrialResult {
  /** The trial's folder on the host (added here, not Harbor's). */
  dir: string;
  trial_name: string;
  verifier_result: { rewards: Record<string, number> } | null;
  exception_info: unknown;
}

/**
 * `harbor run` of a task (default examples/harbor-hello) in the tools image, on denv (default)
 * or on Harbor's own docker backend (`env: null`); returns the job's trial results. The jobs
 * folder is mounted at its host path, so the docker backend's bind mounts name host paths.
 */
interface HarborOptions {
  task?: string;
  env?: string | null;
  mounts?: string[];
  ek?: string[];
}

async function harborRun(job: string, agent: string, o: HarborOptions = {}): Promise<TrialResult[]> {
  const r = await harborProcess(job, agent, o);
  expect(r.code, `${r.stdout}\n${r.stderr}`).toBe(0);
  const dir = path.join(jobsDir, job);
  return readdirSync(dir, { withFileTypes: true })
    .filter((d) => d.isDirectory())
    .map((d) => ({
      ...(JSON.parse(readFileSync(path.join(dir, d.name, "result.json"), "utf8")) as TrialResult),
      dir: path.join(dir, d.name),
    }));
}

/** The `harbor run` process itself (its exit code and output). */
async function harborProcess(job: string, agent: string, o: HarborOptions = {}) {
  const env = o.env === undefined ? "denv.harbor:DenvEnvironment" : o.env;
  return run(
    "docker",
    [
      "run",
      "--rm",
      "--network",
      "host",
      "-v",
      "/var/run/docker.sock:/var/run/docker.sock",
      "-v",
      `${path.join(repo, "examples")}:/examples:ro`,
      "-v",
      `${jobsDir}:${jobsDir}`,
      ...(o.mounts ?? []).flatMap((m) => ["-v", m]),
      "-e",
      `DENV_URL=${stack.url}`,
      "-e",
      `DENV_TOKEN=${stack.token}`,
      TOOLS_IMAGE,
      "harbor",
      "run",
      "--path",
      o.task ?? "/examples/harbor-hello",
      "--agent",
      agent,
      ...(env === null ? [] : ["--env", env]),
      ...(o.ek ?? []).flatMap((kv) => ["--ek", kv]),
      "--jobs-dir",
      jobsDir,
      "--job-name",
      job,
      "-n",
      "1",
    ],
    process.env,
    { timeoutMs: 900_000 },
  );
}

/** denv.harbor's environment tests, which need Harbor: under the tools image's Python and Harbor. */
it("denv.harbor's environment tests pass under Harbor (tools image)", async () => {
  const r = await run(
    "docker",
    [
      "run",
      "--rm",
      "--network",
      "host",
      "-v",
      `${repo}:/repo:ro`,
      // pytest comes from PyPI at test time, trusting what this host trusts.
      "-v",
      "/etc/ssl/certs:/etc/ssl/certs:ro",
      "-e",
      "PIP_CERT=/etc/ssl/certs/ca-certificates.crt",
      "-e",
      "PYTHONDONTWRITEBYTECODE=1",
      "-w",
      "/repo/python",
      TOOLS_IMAGE,
      "sh",
      "-c",
      "/opt/tools/bin/pip install --quiet --disable-pip-version-check pytest && /opt/tools/bin/python -m pytest tests/test_harbor_environment.py -q -p no:cacheprovider",
    ],
    process.env,
    { timeoutMs: 300_000 },
  );
  expect(r.code, `${r.stdout}\n${r.stderr}`).toBe(0);
  expect(r.stdout).toMatch(/\d+ passed/);
  expect(r.stdout).not.toMatch(/skipped|deselected/);
}, 300_000);

interface Deployment {
  kind: string;
  status: string;
  environment: string;
}

async function deployments(project = PROJECT): Promise<Deployment[]> {
  const res = await fetch(`${stack.url}/v1/projects/${project}/deployments`, {
    headers: { authorization: `Bearer ${stack.token}` },
  });
  expect(res.status).toBe(200);
  return ((await res.json()) as { deployments: Deployment[] }).deployments;
}

/** Writes TASK/task.toml through `edit`. */
function editToml(task: string, edit: (toml: string) => string): void {
  const toml = path.join(task, "task.toml");
  writeFileSync(toml, edit(readFileSync(toml, "utf8")));
}

/** Copies a task folder to `to` and edits its task.toml. */
function copyTask(from: string, to: string, edit: (toml: string) => string): void {
  cpSync(from, to, { recursive: true });
  editToml(to, edit);
}

/** Harbor's separate verifier mode, grading /app/hello.txt as the one artifact. */
const separateMode = (toml: string) =>
  toml
    .replace('schema_version = "1.4"\n', 'schema_version = "1.4"\nartifacts = ["/app/hello.txt"]\n')
    .replace("[verifier]\n", '[verifier]\nenvironment_mode = "separate"\n');

/** A task that asks for internet access (also how Harbor's docker backend can run it here). */
const publicNetwork = (toml: string) =>
  toml.replace('network_mode = "no-network"', 'network_mode = "public"');

const count = (deps: Deployment[], kind: string) => deps.filter((d) => d.kind === kind).length;

it("harbor run with the oracle agent on denv gets reward 1.0, twice, deploying once", async () => {
  const first = await harborRun("oracle-1", "oracle");
  expect(first).toHaveLength(1);
  expect(first[0]?.exception_info ?? null).toBeNull();
  expect(first[0]?.verifier_result?.rewards).toEqual({ reward: 1 });

  const afterFirst = await deployments();
  expect(afterFirst.every((d) => d.status === "succeeded")).toBe(true);
  expect(count(afterFirst, "deploy")).toBe(1);
  // The trial's sandbox (fork), its snapshot, the verifier's fork, both destroyed.
  expect(count(afterFirst, "fork")).toBe(2);
  expect(count(afterFirst, "snapshot")).toBe(1);
  expect(count(afterFirst, "destroy")).toBe(2);

  const second = await harborRun("oracle-2", "oracle");
  expect(second[0]?.verifier_result?.rewards).toEqual({ reward: 1 });
  const afterSecond = await deployments();
  expect(count(afterSecond, "deploy")).toBe(1); // no build: the second trial forked
  expect(count(afterSecond, "fork")).toBe(4);
  expect(count(afterSecond, "snapshot")).toBe(2);
  // Newest first: the second trial's deployments are fork, snapshot, fork, destroy x2.
  const newest = afterSecond.slice(0, afterSecond.length - afterFirst.length).map((d) => d.kind);
  expect([...newest].reverse()).toEqual(["fork", "snapshot", "fork", "destroy", "destroy"]);
  // Every sandbox is gone.
  const res = await fetch(`${stack.url}/v1/sandboxes`, {
    headers: { authorization: `Bearer ${stack.token}` },
  });
  expect(res.status).toBe(200);
  const body = (await res.json()) as { sandboxes?: Array<{ id: string; status: string }> };
  expect(Array.isArray(body.sandboxes)).toBe(true);
  expect((body.sandboxes ?? []).filter((e) => e.status !== "destroyed")).toEqual([]);
}, 600_000);

it("the verifier grades the agent's work: the nop agent gets reward 0.0", async () => {
  const trials = await harborRun("nop-1", "nop");
  expect(trials[0]?.verifier_result?.rewards).toEqual({ reward: 0 });
}, 300_000);

it("separate mode: the verifier's environment is a fresh fork where every command runs as the verifier uid", async () => {
  // examples/harbor-hello with `environment_mode = "separate"`: the verifier gets a second
  // environment and, as Harbor specifies, sees the agent's work only as declared artifacts.
  const task = path.join(jobsDir, "hello-separate");
  copyTask(path.join(repo, "examples/harbor-hello"), task, separateMode);
  const testSh = path.join(task, "tests/test.sh");
  writeFileSync(testSh, `${readFileSync(testSh, "utf8")}id -u > /logs/verifier/uid.txt\n`);
  const project = "harbor-hello-separate";

  const solved = await harborRun("separate-oracle", "oracle", { task });
  expect(solved[0]?.exception_info ?? null).toBeNull();
  expect(solved[0]?.verifier_result?.rewards).toEqual({ reward: 1 });
  // Root, as Harbor runs tests: in gVisor's kernel, on a fork the agent never ran in.
  expect(readFileSync(path.join(solved[0]?.dir ?? "", "verifier/uid.txt"), "utf8").trim()).toBe("0");
  // Newest first. Harbor stops the agent's environment before it starts the verifier's: one
  // deploy, the trial's fork destroyed, then the verifier's fork of the same version, no build.
  const kinds = (await deployments(project)).map((d) => d.kind).reverse();
  expect(kinds).toEqual(["deploy", "fork", "destroy", "fork", "destroy"]);

  // The nop agent writes nothing: the verifier's fresh fork has no /app/hello.txt.
  const untouched = await harborRun("separate-nop", "nop", { task });
  expect(untouched[0]?.verifier_result?.rewards).toEqual({ reward: 0 });
  expect(count(await deployments(project), "deploy")).toBe(1);

  // A verifier image of its own (tests/Dockerfile, tests baked in): a project of its own,
  // deployed once; /app does not exist in it until its build creates it for the artifact.
  const own = path.join(jobsDir, "hello-verifier-image");
  cpSync(task, own, { recursive: true });
  writeFileSync(
    path.join(own, "tests/Dockerfile"),
    "FROM debian:bookworm-slim\nCOPY test.sh /tests/test.sh\nRUN chmod 755 /tests/test.sh\n",
  );
  const graded = await harborRun("verifier-image-oracle", "oracle", { task: own });
  expect(graded[0]?.exception_info ?? null).toBeNull();
  expect(graded[0]?.verifier_result?.rewards).toEqual({ reward: 1 });
  expect(readFileSync(path.join(graded[0]?.dir ?? "", "verifier/uid.txt"), "utf8").trim()).toBe("0");
  const verifierKinds = (await deployments("harbor-hello-verifier-image-verifier"))
    .map((d) => d.kind)
    .reverse();
  expect(verifierKinds).toEqual(["deploy", "fork", "destroy"]);
}, 900_000);

it("a task that asks for internet access gets the package mirrors, or is refused before anything is deployed on request", async () => {
  const task = path.join(jobsDir, "hello-public");
  copyTask(path.join(repo, "examples/harbor-hello"), task, publicNetwork);
  // Harbor builds the environment before the trial starts: the refusal ends the job.
  const refused = await harborProcess("public-refused", "oracle", { task, ek: ["public_network=refuse"] });
  expect(refused.code).not.toBe(0);
  const said = `${refused.stdout}${refused.stderr}`.replace(/[│\s]+/g, " ");
  expect(said).toContain(HarborTaskMessages.publicNetwork("hello-public").replace(/\s+/g, " "));
  const project = await fetch(`${stack.url}/v1/projects/harbor-hello-public`, {
    headers: { authorization: `Bearer ${stack.token}` },
  });
  expect(project.status).toBe(404);
  const denied = await harborRun("public-denied", "oracle", { task, ek: ["public_network=deny"] });
  expect(denied[0]?.exception_info ?? null).toBeNull();
  expect(denied[0]?.verifier_result?.rewards).toEqual({ reward: 1 });
}, 600_000);

/**
 * The rewards of the oracle and the nop agent on a task through `harbor run`, on denv and on
 * Harbor's own docker backend: what parity means (the same on both: 1.0 and 0.0).
 */
async function parity(name: string, task: string): Promise<Array<[string, string, number | undefined]>> {
  // The two backends at once (they share nothing but the engine); on each, the oracle first,
  // then the nop agent (on denv, its trial forks the version the oracle's trial deployed).
  const backend = async (label: string, env: string | null | undefined) => {
    const rows: Array<[string, string, number | undefined]> = [];
    for (const agent of ["oracle", "nop"]) {
      const trials = await harborRun(`${name}-${label}-${agent}`, agent, { task, env });
      expect(trials[0]?.exception_info ?? null, `${name} ${label} ${agent}`).toBeNull();
      rows.push([label, agent, trials[0]?.verifier_result?.rewards?.reward]);
    }
    return rows;
  };
  const [denv, docker] = await Promise.all([backend("denv", undefined), backend("docker", null)]);
  return [...denv, ...docker];
}

const SAME = [
  ["denv", "oracle", 1],
  ["denv", "nop", 0],
  ["docker", "oracle", 1],
  ["docker", "nop", 0],
];

it("a task in the style of Terminal-Bench (root solution, tests that install their tools, network_mode public): the same rewards on denv and on Harbor's docker backend", async () => {
  // examples/harbor-rootfix: the solution fixes a root-owned file and installs jq; the tests
  // install bc. On denv the agent is root inside gVisor, and each phase reaches the host's
  // package mirrors through denvd's proxy and nothing else.
  const project = "harbor-harbor-rootfix";
  expect(await parity("rootfix", "/examples/harbor-rootfix")).toEqual(SAME);
  expect(count(await deployments(project), "deploy")).toBe(1);
  // The environment's evidence: the agent root in gVisor, the package mirrors its only way out.
  const res = await fetch(`${stack.url}/v1/environments/${project}/alpha`, {
    headers: { authorization: `Bearer ${stack.token}` },
  });
  expect(res.status).toBe(200);
  const env = (await res.json()) as { evidence?: { agent?: unknown; egress?: { mode?: string } } };
  expect(env.evidence?.agent).toMatchObject({ user: "root", root: true, confinement: "gvisor" });
  expect(env.evidence?.egress?.mode).toBe("mirrors");
}, 1_500_000);

it("a task with an MCP server service, and a separate-mode task: the same rewards on denv and on Harbor's docker backend", async () => {
  // examples/harbor-mcp: mcp-server extends Harbor's base, declared in [[environment.mcp_servers]];
  // and Harbor's separate verifier mode (public, so that Harbor's docker backend runs it here).
  // The two tasks share nothing but the engine: they run at once.
  const task = path.join(jobsDir, "hello-separate-parity");
  copyTask(path.join(repo, "examples/harbor-hello"), task, (t) => publicNetwork(separateMode(t)));
  const [mcp, separate] = await Promise.all([
    parity("mcp", "/examples/harbor-mcp"),
    parity("separate", task),
  ]);
  expect(mcp).toEqual(SAME);
  expect(separate).toEqual(SAME);
}, 1_500_000);

it("a Harbor task with a loaded PostgreSQL service: the oracle gets 1.0 twice, the second trial forks", async () => {
  const project = "harbor-harbor-shop";
  const first = await harborRun("shop-1", "oracle", { task: "/examples/harbor-shop" });
  expect(first[0]?.exception_info ?? null).toBeNull();
  expect(first[0]?.verifier_result?.rewards).toEqual({ reward: 1 });
  const afterFirst = await deployments(project);
  expect(count(afterFirst, "deploy")).toBe(1);
  const second = await harborRun("shop-2", "oracle", { task: "/examples/harbor-shop" });
  expect(second[0]?.verifier_result?.rewards).toEqual({ reward: 1 });
  const afterSecond = await deployments(project);
  expect(count(afterSecond, "deploy")).toBe(1); // the loaded database is forked, not loaded again
  const newest = afterSecond.slice(0, afterSecond.length - afterFirst.length).map((d) => d.kind);
  expect([...newest].reverse()).toEqual(["fork", "snapshot", "fork", "destroy", "destroy"]);
}, 1_200_000);

it("a multi-container task whose compose extends Harbor's base: oracle 1.0 and nop 0.0, as on Harbor's docker backend", async () => {
  // examples/harbor-multi: main has no build (Harbor's base builds it from environment/), kv is
  // the only way to the value; denv.harbor merges the compose file over Harbor's base.
  const project = "harbor-harbor-multi";
  // The same task on Harbor's own docker backend (as public: no egress-control sidecar here),
  // at the same time.
  const task = path.join(jobsDir, "harbor-multi-docker");
  copyTask(path.join(repo, "examples/harbor-multi"), task, publicNetwork);
  const [[solved, untouched], [docker, dockerNop]] = await Promise.all([
    (async () => [
      await harborRun("multi-oracle", "oracle", { task: "/examples/harbor-multi" }),
      await harborRun("multi-nop", "nop", { task: "/examples/harbor-multi" }),
    ])(),
    (async () => [
      await harborRun("multi-docker-oracle", "oracle", { task, env: null }),
      await harborRun("multi-docker-nop", "nop", { task, env: null }),
    ])(),
  ]);
  expect(solved?.[0]?.exception_info ?? null).toBeNull();
  expect(solved?.[0]?.verifier_result?.rewards).toEqual({ reward: 1 });
  expect(untouched?.[0]?.exception_info ?? null).toBeNull();
  expect(untouched?.[0]?.verifier_result?.rewards).toEqual({ reward: 0 });
  expect(count(await deployments(project), "deploy")).toBe(1);
  expect(docker?.[0]?.exception_info ?? null).toBeNull();
  expect(docker?.[0]?.verifier_result?.rewards).toEqual({ reward: 1 });
  expect(dockerNop?.[0]?.exception_info ?? null).toBeNull();
  expect(dockerNop?.[0]?.verifier_result?.rewards).toEqual({ reward: 0 });
}, 1_200_000);

it("denv import harbor: the imported harbor-hello deploys and denv verify grades 1.0 and 0.0", async () => {
  const out = path.join(jobsDir, "hello-denv");
  const imported = await stack.denv([
    "import",
    "harbor",
    path.join(repo, "examples/harbor-hello"),
    "--out",
    out,
    "--project",
    "imported-hello",
  ]);
  expect(imported.code, imported.stderr).toBe(0);
  expect((await stack.denv(["projects", "create", "imported-hello"])).code).toBe(0);
  const deployed = await stack.denv(["deploy", out, "--project", "imported-hello", "--env", "alpha"], {
    timeoutMs: 600_000,
  });
  expect(deployed.code, `${deployed.stdout}\n${deployed.stderr}`).toBe(0);
  for (const name of ["solved", "untouched"]) {
    expect((await stack.denv(["env", "fork", "imported-hello/alpha", "--name", name])).code).toBe(0);
  }
  const solve = readFileSync(path.join(out, "solution/solve.sh"));
  const ran = await stack.denv(["exec", "-i", "imported-hello/solved", "--", "bash", "-s"], { input: solve });
  expect(ran.code, ran.stderr).toBe(0);
  const solved = await stack.json<{ status: string; reward: number }>(["verify", "imported-hello/solved"]);
  expect(solved).toMatchObject({ status: "graded", reward: 1 });
  const untouched = await stack.json<{ status: string; reward: number }>([
    "verify",
    "imported-hello/untouched",
  ]);
  expect(untouched).toMatchObject({ status: "graded", reward: 0 });

  // denv export harbor: the version back as a Harbor task that Harbor's own docker backend runs.
  const task = path.join(jobsDir, "hello-task");
  const exported = await stack.denv(["export", "harbor", "imported-hello@v1", task, "--source", out]);
  expect(exported.code, exported.stderr).toBe(0);
  // Harbor's docker backend enforces network_mode = "no-network" only with its egress-control
  // sidecar, which needs kernel support this test machine lacks: run the exported task as public.
  editToml(task, publicNetwork);
  const trials = await harborRun("exported-1", "oracle", { task, env: null });
  expect(trials[0]?.exception_info ?? null).toBeNull();
  expect(trials[0]?.verifier_result?.rewards).toEqual({ reward: 1 });
  for (const name of ["solved", "untouched"]) await stack.denv(["env", "destroy", `imported-hello/${name}`]);
}, 1_200_000);

it("denv import harbor of a separate-mode task: denv's verifier gets the artifacts, 1.0 and 0.0", async () => {
  const task = path.join(jobsDir, "hello-separate-import");
  copyTask(path.join(repo, "examples/harbor-hello"), task, separateMode);
  const out = path.join(jobsDir, "hello-separate-denv");
  const imported = await stack.denv(["import", "harbor", task, "--out", out, "--project", "sep-hello"]);
  expect(imported.code, imported.stderr).toBe(0);
  expect((await stack.denv(["projects", "create", "sep-hello"])).code).toBe(0);
  const deployed = await stack.denv(["deploy", out, "--project", "sep-hello", "--env", "alpha"], {
    timeoutMs: 600_000,
  });
  expect(deployed.code, `${deployed.stdout}\n${deployed.stderr}`).toBe(0);
  for (const name of ["solved", "untouched"]) {
    expect((await stack.denv(["env", "fork", "sep-hello/alpha", "--name", name])).code).toBe(0);
  }
  const solve = readFileSync(path.join(out, "solution/solve.sh"));
  expect(
    (await stack.denv(["exec", "-i", "sep-hello/solved", "--", "bash", "-s"], { input: solve })).code,
  ).toBe(0);
  const solved = await stack.json<{ status: string; reward: number }>(["verify", "sep-hello/solved"]);
  expect(solved).toMatchObject({ status: "graded", reward: 1 });
  const untouched = await stack.json<{ status: string; reward: number }>(["verify", "sep-hello/untouched"]);
  expect(untouched).toMatchObject({ status: "graded", reward: 0 });
  for (const name of ["solved", "untouched", "alpha"])
    await stack.denv(["env", "destroy", `sep-hello/${name}`]);
}, 900_000);

it("denv export harbor of a project with a database: Harbor's own docker backend gets 1.0", async () => {
  const out = path.join(jobsDir, "shop-denv");
  const imported = await stack.denv([
    "import",
    "harbor",
    path.join(repo, "examples/harbor-shop"),
    "--out",
    out,
  ]);
  expect(imported.code, imported.stderr).toBe(0);
  expect((await stack.denv(["projects", "create", "shop-denv"])).code).toBe(0);
  const deployed = await stack.denv(["deploy", out, "--project", "shop-denv", "--env", "alpha"], {
    timeoutMs: 900_000,
  });
  expect(deployed.code, `${deployed.stdout}\n${deployed.stderr}`).toBe(0);
  const task = path.join(jobsDir, "shop-task");
  const exported = await stack.denv(["export", "harbor", "shop-denv@v1", task, "--source", out]);
  expect(exported.code, exported.stderr).toBe(0);
  // Harbor merges environment/docker-compose.yaml (main + the database) over its own; as above,
  // the docker backend runs it as public (no egress-control sidecar on this machine).
  editToml(task, publicNetwork);
  const trials = await harborRun("shop-exported", "oracle", { task, env: null });
  expect(trials[0]?.exception_info ?? null).toBeNull();
  expect(trials[0]?.verifier_result?.rewards).toEqual({ reward: 1 });
  await stack.denv(["env", "destroy", "shop-denv/alpha"]);
}, 1_500_000);
