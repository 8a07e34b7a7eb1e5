import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { TrlMessages } from "@denv/spec";
import { afterAll, beforeAll, expect, it } from "vitest";
import { codeBlocks } from "./doc-blocks.js";
import { repo, run, type Stack, startStack } from "./stack.js";

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
 * - verifiers: its Harbor taskset loading the task folder `denv export harbor` wrote
 *   (python/tests/trainers/vf_harbor_taskset.py).
 */
const IMAGE = "denv-tools:trixie";
const HELLO = "harbor-harbor-hello";

let stack: Stack;
let work: string;

beforeAll(async () => {
  const built = await run(path.join(repo, "deploy/tools-image"), ["--tag", IMAGE], process.env, {
    timeoutMs: 1_500_000,
  });
  if (built.code !== 0) throw new Error(`deploy/tools-image failed: ${built.stdout}\n${built.stderr}`);
  stack = await startStack();
  work = mkdtempSync(path.join(os.tmpdir(), "denv-trainers-"));
}, 1_800_000);

afterAll(async () => {
  await stack?.close();
  if (work) rmSync(work, { recursive: true, force: true });
}, 180_000);

/** A Python script of python/tests/trainers in the tools image, on the host's network. */
async function tools(python: string, args: string[], timeoutMs = 600_000) {
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
      `${work}:${work}`,
      "-e",
      `DENV_URL=${stack.url}`,
      "-e",
      `DENV_TOKEN=${stack.token}`,
      "-e",
      "TRL_EXPERIMENTAL_SILENCE=1",
      "-e",
      "PYTHONDONTWRITEBYTECODE=1",
      IMAGE,
      python,
      ...args,
    ],
    process.env,
    { timeoutMs },
  );
  expect(r.code, `${r.stdout}\n${r.stderr}`).toBe(0);
  const last = r.stdout.trim().split("\n").at(-1) ?? "";
  return JSON.parse(last) as unknown;
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
  const tasks = path.join(work, "trl-tasks");
  mkdirSync(tasks);
  cpSync(path.join(repo, "examples/harbor-hello"), path.join(tasks, "harbor-hello"), { recursive: true });
  const report = (await tools("python", ["/trainers/trl_rollouts.py", tasks])) as {
    task: string;
    solve: { prompt: string; outputs: string[] };
    nothing: { prompt: string; outputs: string[] };
    rewards: number[];
    refused: string;
  };
  expect(report.task).toBe("harbor-hello");
  const instruction = readFileSync(path.join(repo, "examples/harbor-hello/instruction.md"), "utf8").trim();
  expect(report.solve.prompt).toContain(instruction);
  expect(report.solve.outputs).toHaveLength(1);
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
  const trials = (await tools("python", [
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
