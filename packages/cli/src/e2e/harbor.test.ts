import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, beforeAll, expect, it } from "vitest";
import { repo, run, type Stack, startStack } from "./stack.js";

/**
 * Harbor on denv: `harbor run` (inside the tools image: Python 3.13, Harbor pinned in
 * deploy/tools-image) with `--env denv.harbor:DenvEnvironment` against a live stack, on
 * examples/harbor-hello. The rewards are read from Harbor's own trial result files; the kinds of
 * the control plane's deployments show that the second trial forked the deployed version
 * instead of building again, and that each verifier ran on a fork of a snapshot.
 */
const IMAGE = "denv-tools:trixie";
const PROJECT = "harbor-harbor-hello";

let stack: Stack;
let jobsDir: string;

beforeAll(async () => {
  // Builds the image when missing (or when python/ changed); exits at once otherwise.
  const built = await run(path.join(repo, "deploy/tools-image"), ["--tag", IMAGE], process.env, {
    timeoutMs: 1_500_000,
  });
  if (built.code !== 0) throw new Error(`deploy/tools-image failed: ${built.stdout}\n${built.stderr}`);
  stack = await startStack();
  jobsDir = mkdtempSync(path.join(os.tmpdir(), "denv-harbor-jobs-"));
}, 1_800_000);

afterAll(async () => {
  await stack?.close();
  if (jobsDir) rmSync(jobsDir, { recursive: true, force: true });
}, 180_000);

interface TrialResult {
  trial_name: string;
  verifier_result: { rewards: Record<string, number> } | null;
  exception_info: unknown;
}

/** `harbor run` of examples/harbor-hello in the tools image; returns the job's trial results. */
async function harborRun(job: string, agent: string): Promise<TrialResult[]> {
  const r = await run(
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
      `${jobsDir}:/jobs`,
      "-e",
      `DENV_URL=${stack.url}`,
      "-e",
      `DENV_TOKEN=${stack.token}`,
      IMAGE,
      "harbor",
      "run",
      "--path",
      "/examples/harbor-hello",
      "--agent",
      agent,
      "--env",
      "denv.harbor:DenvEnvironment",
      "--jobs-dir",
      "/jobs",
      "--job-name",
      job,
      "-n",
      "1",
    ],
    process.env,
    { timeoutMs: 300_000 },
  );
  expect(r.code, `${r.stdout}\n${r.stderr}`).toBe(0);
  const dir = path.join(jobsDir, job);
  return readdirSync(dir, { withFileTypes: true })
    .filter((d) => d.isDirectory())
    .map((d) => JSON.parse(readFileSync(path.join(dir, d.name, "result.json"), "utf8")) as TrialResult);
}

interface Deployment {
  kind: string;
  status: string;
  environment: string;
}

async function deployments(): Promise<Deployment[]> {
  const res = await fetch(`${stack.url}/v1/projects/${PROJECT}/deployments`, {
    headers: { authorization: `Bearer ${stack.token}` },
  });
  expect(res.status).toBe(200);
  return ((await res.json()) as { deployments: Deployment[] }).deployments;
}

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
