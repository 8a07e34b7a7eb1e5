import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { TrlMessages } from "@denv/spec";
import { afterAll, beforeAll, expect, it } from "vitest";
import { codeBlocks } from "./doc-blocks.js";
import {
  cli,
  ensureToolsImage,
  imagesAdded,
  repo,
  run,
  type Stack,
  startStack,
  TOOLS_IMAGE,
} from "./stack.js";

/**
 * Trainers on denv (docs/blog/trainers.md) and verifiers' Harbor taskset (docs/blog/verifiers.md,
 * section 2), against one live stack, each framework's own environment-side code running in the
 * tools image (deploy/tools-image: TRL 1.16.0 beside Harbor 0.26.0 in /opt/tools, verifiers
 * 0.4.0 with its Harbor 0.24.0 in /opt/vf):
 *
 * - TRL: `HarborSpec(..., agent="denv.trl:DenvHarborBashEnv")`'s environment_factory, reset, bash
 *   tool and reward_funcs, driven by a scripted policy (python/tests/trainers/trl_rollouts.py);
 * - SkyRL: the harbor_trial_config YAML of docs/blog/trainers.md, given what SkyRL's
 *   HarborGenerator adds, as a Harbor TrialConfig run by Harbor (python/tests/trainers/skyrl_trial.py);
 * - verifiers: `vf-eval harbor` over the task folder `denv export harbor` wrote of
 *   examples/verifiers-harbor, its harness installed offline, a scripted model on loopback
 *   (python/tests/trainers/vf_harbor_taskset.py): rewards 1.0 and 0.0.
 */
const HELLO = "harbor-harbor-hello";

let stack: Stack;
let work: string;
/** verifiers' compose runs build `vf-<run>-<service>` images; the ones this file adds go. */
let vfImages: Awaited<ReturnType<typeof imagesAdded>> | undefined;

beforeAll(async () => {
  await ensureToolsImage();
  vfImages = await imagesAdded((n) => /^vf-[0-9a-f]{32}-/.test(n));
  stack = await startStack();
  work = mkdtempSync(path.join(os.tmpdir(), "denv-trainers-"));
}, 1_800_000);

afterAll(async () => {
  await stack?.close();
  await vfImages?.remove();
  // The images the stack built for the verifiers test's project (builds carry no host label).
  const built = await run("docker", ["images", "--format", "{{.Repository}}:{{.Tag}}"], process.env);
  for (const image of built.stdout.split("\n").filter((n) => n.startsWith("denv-build/prices/")))
    await run("docker", ["rmi", "-f", image], process.env);
  if (work) rmSync(work, { recursive: true, force: true });
}, 180_000);

/** A Python script of python/tests/trainers in the tools image, on the host's network. */
async function tools(argv: string[], o: { docker?: boolean; env?: string[]; cwd?: string } = {}) {
  const r = await run(
    "docker",
    [
      "run",
      "--rm",
      "--network",
      "host",
      "--label",
      "ai.denv.test=trainers",
      "-v",
      `${path.join(repo, "python/tests/trainers")}:/trainers:ro`,
      "-v",
      `${path.join(repo, "examples")}:/examples:ro`,
      "-v",
      `${path.join(repo, "docs")}:/docs:ro`,
      "-v",
      `${work}:${work}`,
      // verifiers' docker runtime hands a unix socket to a helper container through a bind
      // mount of its temp folder: a path the engine sees at the same place.
      // (verifiers' compose runs, python/tests/trainers/vf_harbor_taskset.py, also read the
      // repository's scripted model, at /repo.)
      ...(o.docker
        ? [
            "-v",
            "/var/run/docker.sock:/var/run/docker.sock",
            "-e",
            `TMPDIR=${work}`,
            "-v",
            `${repo}:/repo:ro`,
          ]
        : []),
      ...(o.cwd ? ["-w", o.cwd] : []),
      "-e",
      `DENV_URL=${stack.url}`,
      "-e",
      `DENV_TOKEN=${stack.token}`,
      "-e",
      "TRL_EXPERIMENTAL_SILENCE=1",
      "-e",
      "PYTHONDONTWRITEBYTECODE=1",
      ...(o.env ?? []).flatMap((e) => ["-e", e]),
      TOOLS_IMAGE,
      ...argv,
    ],
    process.env,
    { timeoutMs: 900_000 },
  );
  expect(r.code, `${r.stdout}\n${r.stderr}`).toBe(0);
  // The scripts print one JSON line last; what ran before them may print after (vf-eval's
  // progress display) on the same stream.
  const line = r.stdout.split("\n").findLast((l) => /^[[{]/.test(l));
  expect(line, r.stdout).toBeDefined();
  return JSON.parse(line ?? "") as unknown;
}

interface Deployment {
  kind: string;
  status: string;
}

async function deployments(project: string): Promise<Deployment[]> {
  const res = await fetch(`${stack.url}/v1/projects/${project}/deployments`, {
    headers: { authorization: `Bearer ${stack.token}` },
  });
  expect(res.status).toBe(200);
  return ((await res.json()) as { deployments: Deployment[] }).deployments;
}

const count = (deps: Deployment[], kind: string) => deps.filter((d) => d.kind === kind).length;

async function liveSandboxes(): Promise<unknown[]> {
  const res = await fetch(`${stack.url}/v1/sandboxes`, {
    headers: { authorization: `Bearer ${stack.token}` },
  });
  expect(res.status).toBe(200);
  const body = (await res.json()) as { sandboxes?: Array<{ status: string }> };
  return (body.sandboxes ?? []).filter((s) => s.status !== "destroyed");
}

/** The body of the fenced block of a docs page whose opening fence is on `line` (1-based). */
function blockBody(text: string, line: number): string {
  const lines = text.split("\n");
  const end = lines.findIndex((l, i) => i >= line && /^```\s*$/.test(l));
  return `${lines.slice(line, end).join("\n")}\n`;
}

it("TRL: HarborSpec's environment_factory on denv.trl, reset / bash / reward: 1.0 for the solving policy, 0.0 for the idle one", async () => {
  const trl = path.join(work, "trl");
  mkdirSync(path.join(trl, "tasks"), { recursive: true });
  cpSync(path.join(repo, "examples/harbor-hello"), path.join(trl, "tasks/harbor-hello"), { recursive: true });
  const report = (await tools(["python", "/trainers/trl_rollouts.py", "/docs/blog/trainers.md", trl])) as {
    task: string;
    solve: { prompt: string; outputs: string[] };
    nothing: { prompt: string; outputs: string[] };
    rewards: number[];
    refused: string;
  };
  expect(report.task).toBe("harbor-hello");
  const instruction = readFileSync(path.join(repo, "examples/harbor-hello/instruction.md"), "utf8").trim();
  expect(report.solve.prompt).toContain(instruction);
  // TRL's bash tool ran in the rollout's sandbox: the solution's write, then its result.
  expect(report.solve.outputs).toEqual(["(empty output, rc=0)", "Hello, world!\n"]);
  expect(report.nothing.outputs).toEqual([]);
  expect(report.rewards).toEqual([1, 0]);
  expect(report.refused).toBe(TrlMessages.environmentType("docker"));
  // One deploy; each rollout a fork of it, each reward graded on a fork of its snapshot.
  const deps = await deployments(HELLO);
  expect(deps.every((d) => d.status === "succeeded")).toBe(true);
  expect(count(deps, "deploy")).toBe(1);
  expect(count(deps, "fork")).toBe(4);
  expect(count(deps, "snapshot")).toBe(2);
  expect(count(deps, "destroy")).toBe(4);
  expect(await liveSandboxes()).toEqual([]);
}, 900_000);

it("SkyRL: the harbor_trial_config of docs/blog/trainers.md, as SkyRL's HarborGenerator completes it, runs on denv: 1.0 and 0.0", async () => {
  const page = readFileSync(path.join(repo, "docs/blog/trainers.md"), "utf8");
  const yaml = codeBlocks(page).find(
    (b) => b.info === "yaml" && /harbor_trial_config/.test(blockBody(page, b.line)),
  );
  expect(yaml, "the SkyRL yaml block of docs/blog/trainers.md").toBeDefined();
  const config = path.join(work, "harbor_trial_config.yaml");
  writeFileSync(config, blockBody(page, yaml?.line ?? 0));
  const before = count(await deployments(HELLO), "fork");
  const trials = (await tools([
    "python",
    "/trainers/skyrl_trial.py",
    config,
    "/examples/harbor-hello",
    "http://127.0.0.1:8000",
  ])) as Array<{ agent: string; import_path: string; reward: number | null; exception: string | null }>;
  expect(trials).toEqual([
    { agent: "oracle", import_path: "denv.harbor:DenvEnvironment", reward: 1, exception: null },
    { agent: "nop", import_path: "denv.harbor:DenvEnvironment", reward: 0, exception: null },
  ]);
  const deps = await deployments(HELLO);
  expect(count(deps, "deploy")).toBe(1); // the task TRL's rollouts deployed: forked, not built
  expect(count(deps, "fork") - before).toBe(4);
  expect(await liveSandboxes()).toEqual([]);
}, 900_000);

/** The sh block of a docs page whose first line starts with `first`, as one shell script. */
function shBlock(page: string, first: string): string {
  const text = readFileSync(path.join(repo, "docs", page), "utf8");
  const block = codeBlocks(text).find((b) => b.info === "sh" && blockBody(text, b.line).startsWith(first));
  expect(block, `the block of docs/${page} starting with ${first}`).toBeDefined();
  return blockBody(text, block?.line ?? 0);
}

interface VerifiersReport {
  tasks: Array<{ name: string; prompt: string; image: string | null; network_allow: string[] }>;
  exit_code: number;
  rollouts: Array<{
    policy: string | null;
    ok: boolean;
    rewards: Array<Record<string, { score: number }>>;
    errors: Array<{ type: string; message: string }>;
  }>;
  tool_results: string[];
  exported: string;
}

it("verifiers: `vf-eval harbor` over the task `denv export harbor` wrote, offline: 1.0 for the solving model, 0.0 for the idle one", async () => {
  // docs/blog/verifiers.md, section 2, in the work folder (examples/ is the repository's; `denv`
  // is the stack's): fetch.sh, deploy, export, then the two edits verifiers' docker runtime needs.
  symlinkSync(path.join(repo, "examples"), path.join(work, "examples"));
  const denv = `denv() { node ${JSON.stringify(cli)} "$@"; }`;
  const sh = async (script: string) => {
    const r = await run("bash", ["-c", `set -e; cd ${work}; ${denv}\n${script}`], stack.env, {
      timeoutMs: 900_000,
    });
    expect(r.code, `${script}\n${r.stdout}\n${r.stderr}`).toBe(0);
  };
  await sh(shBlock("blog/verifiers.md", "examples/verifiers-harbor/fetch.sh"));
  // The example is a denv environment too: its own verifier grades the answer on a fork.
  const answered = await stack.denv([
    "exec",
    "prices/alpha",
    "--",
    "sh",
    "-c",
    "echo 1854 > /workspace/total.txt",
  ]);
  expect(answered.code, answered.stderr).toBe(0);
  const graded = await stack.json<{ status: string; reward: number }>(["verify", "prices/alpha"]);
  expect(graded).toMatchObject({ status: "graded", reward: 1 });
  cpSync(path.join(work, "prices-task"), path.join(work, "prices-exported"), { recursive: true });
  await sh(shBlock("blog/verifiers.md", "sed -i"));
  writeFileSync(path.join(work, "vf-eval.sh"), shBlock("blog/verifiers.md", "mkdir -p ~/.cache/harbor"));
  // verifiers builds and starts a compose project per rollout; what it builds goes in afterAll.
  const report = (await tools(
    [
      "python",
      "/trainers/vf_harbor_taskset.py",
      "prices-task",
      path.join(work, "vf-eval.sh"),
      "prices-exported",
      "/repo/python/tests/integration",
    ],
    { docker: true, env: ["PATH=/opt/vf/bin:/usr/bin:/bin", "MODEL_API_KEY=none"], cwd: work },
  )) as VerifiersReport;
  expect(report.tasks).toEqual([
    expect.objectContaining({
      name: "prices-task",
      prompt: readFileSync(path.join(repo, "examples/verifiers-harbor/instruction.md"), "utf8").trim(),
      image: null,
      network_allow: ["*"],
    }),
  ]);
  expect(report.exit_code).toBe(0);
  expect(report.rollouts, JSON.stringify(report)).toEqual([
    { policy: "idle", ok: true, rewards: [{ reward: { score: 0, weight: 1 } }], errors: [] },
    { policy: "solve", ok: true, rewards: [{ reward: { score: 1, weight: 1 } }], errors: [] },
  ]);
  // The solving agent's one command ran in main and read the prices service.
  expect(report.tool_results).toEqual(["total 1854\n"]);
  // The task as exported (no-network): refused by verifiers' compose runtime on local Docker.
  expect(report.exported).toBe("Harbor Compose on local Docker requires public networking");
  const left = await run("docker", ["ps", "-a", "--format", "{{.Names}}"], process.env);
  expect(left.stdout.split("\n").filter((n) => n.startsWith("vf-"))).toEqual([]);
}, 1_200_000);
