import { createHash } from "node:crypto";
import {
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import os from "node:os";
import path from "node:path";
import { Protection, SpecialFileReasons } from "@denv/spec";
import { afterAll, beforeAll, expect, it } from "vitest";
import { runnableLines } from "./doc-blocks.js";
import { cli, type RunResult, repo, run, type Stack, startStack } from "./stack.js";

/**
 * Karotte on denv (docs/blog/karotte.md), one heavy run on one stack: the page's `karotte` blocks
 * run as written. `denv import karotte` of examples/karotte-hello, its deploy (the image built
 * once by denvd from Debian trixie and karotte 3.0.100's wheels, downloaded on the host by the
 * page's `karotte-wheels` block into a cache keyed by that line), three forks where
 * `karotte run --no-containerized` plays Karotte's fake model (`solve`, `idle`, `symlink`) at
 * once, graded by `denv verify` with Karotte's own judges re-run on a fork (1.0, 0.0, and refused
 * by protection 3), the same with the answer key only in the verifier's image (`--answer-key
 * verifier`: Karotte's in-run grade 0, denv's 1.0), and Karotte's own sandbox check,
 * `karotte check confinement`, in the environment.
 */
let stack: Stack;
let work: string;

/** The page's line with `denv` as the built CLI, in the work folder. */
function shell(line: string): Promise<RunResult> {
  const script = `denv() { node ${JSON.stringify(cli)} "$@"; }\n${line}`;
  return run("bash", ["-c", script], stack.env, { timeoutMs: 900_000 });
}

async function runLines(lines: Array<{ line: string; code: number }>): Promise<string[]> {
  const outputs: string[] = [];
  for (const { line, code } of lines) {
    const r = await shell(`cd ${JSON.stringify(work)}\n${line}`);
    expect(r.code, `${line}\n${r.stdout}\n${r.stderr}`).toBe(code);
    outputs.push(`${r.stdout}${r.stderr}`);
  }
  return outputs;
}

beforeAll(async () => {
  const base = await run(path.join(repo, "deploy/base-image"), ["--tag", "debian:trixie-slim"], process.env, {
    timeoutMs: 600_000,
  });
  if (base.code !== 0) throw new Error(`deploy/base-image failed: ${base.stderr}`);
  // The wheels, once per download line (the page's, run with the repository venv's pip, in a
  // cache folder keyed by the line).
  const [download] = runnableLines("blog/karotte.md", "karotte-wheels");
  if (download === undefined) throw new Error("blog/karotte.md has no karotte-wheels block");
  const key = createHash("sha256").update(download.line).digest("hex").slice(0, 16);
  const cache = path.join(
    process.env.XDG_CACHE_HOME ?? path.join(os.homedir(), ".cache"),
    "denv/karotte-wheels",
    key,
  );
  if (!existsSync(path.join(cache, ".complete"))) {
    mkdirSync(cache, { recursive: true });
    const env = { ...process.env, PATH: `${path.join(repo, "python/.venv/bin")}:${process.env.PATH}` };
    const got = await run("bash", ["-c", `cd ${JSON.stringify(cache)} && ${download.line}`], env, {
      timeoutMs: 600_000,
    });
    if (got.code !== 0) throw new Error(`pip download failed: ${got.stdout}\n${got.stderr}`);
    writeFileSync(path.join(cache, ".complete"), "");
  }
  stack = await startStack();
  work = mkdtempSync(path.join(os.tmpdir(), "denv-karotte-"));
  mkdirSync(path.join(work, "examples"));
  symlinkSync(path.join(repo, "examples/karotte-hello"), path.join(work, "examples/karotte-hello"));
  // The folder the page's line wrote (`--dest wheels`), where the page's next lines expect it.
  cpSync(path.join(cache, "wheels"), path.join(work, "wheels"), { recursive: true });
}, 1_200_000);

afterAll(async () => {
  await stack?.close();
  if (work) rmSync(work, { recursive: true, force: true });
}, 180_000);

it("imports, deploys, runs karotte with its fake model in three forks, grades 1.0, 0.0 and refused, and runs karotte's own check", async () => {
  const lines = runnableLines("blog/karotte.md", "karotte");
  // The blocks in page order: import + deploy (4), solved (3), idle (3), cheat (4), the answer key
  // in the verifier only (7), the check (4).
  expect(lines.length).toBe(25);
  const [importDeploy, solved, idle, cheat, key, check] = [
    lines.slice(0, 4),
    lines.slice(4, 7),
    lines.slice(7, 10),
    lines.slice(10, 14),
    lines.slice(14, 21),
    lines.slice(21),
  ];

  const deployed = await runLines(importDeploy);
  expect(deployed[0]).toContain("project    karotte-hello");
  const compose = readFileSync(path.join(work, "karotte-hello-denv/compose.yaml"), "utf8");
  expect(compose).toContain("sandbox: gvisor");
  expect(readFileSync(path.join(work, "karotte-hello-denv/denv-verifier/grade.py"), "utf8")).toBe(
    readFileSync(path.join(repo, "python/src/denv/karotte/_grade.py"), "utf8"),
  );

  // The four episodes at once (each block in order): Karotte's run takes ~20 s under gVisor.
  const [solvedOut, idleOut, cheatOut, keyOut] = await Promise.all([
    runLines(solved),
    runLines(idle),
    runLines(cheat),
    runLines(key),
  ]);
  const [cheatRun = "", , cheatVerify = ""] = cheatOut.slice(1);
  const [solvedRun = "", solvedVerify = ""] = solvedOut.slice(1);
  const [idleRun = "", idleVerify = ""] = idleOut.slice(1);
  // Karotte's own grading inside the run...
  expect(solvedRun).toContain("Result: passed, 2/2 steps passed, final score 1.0");
  expect(idleRun).toContain("Result: failed, 0/2 steps passed, final score 0.0");
  // ...and denv's, on a fork, as another principal, with Karotte's judges.
  expect(solvedVerify).toMatch(/^reward\s+1$/m);
  expect(solvedVerify).toMatch(/^\s+step_2\s+1$/m);
  expect(solvedVerify).toMatch(/^status\s+graded$/m);
  expect(solvedVerify).toContain('step 2: score 1.0 {"answer": "7"');
  expect(idleVerify).toMatch(/^reward\s+0$/m);
  expect(idleVerify).toMatch(/^\s+step_1\s+0$/m);
  expect(idleVerify).toContain("step 1: score 0.0");
  // Protection 3 twice: Karotte refuses the student's symlink (step 2 scores 0), then denv refuses
  // the episode whose /out holds a symlink escaping it, before the verifier runs.
  expect(cheatRun).toContain("misbehavior: /workdir/answer.txt is a symlink");
  expect(cheatRun).toContain("Result: failed, 1/2 steps passed, final score 0.0");
  expect(cheatVerify).toMatch(/^status\s+refused$/m);
  expect(cheatVerify).toMatch(/^reward\s+0$/m);
  const refusal = Protection.specialFile("/out/key", SpecialFileReasons.symlinkEscapes);
  expect(cheatVerify).toContain(refusal);
  expect(readFileSync(path.join(repo, "docs/blog/karotte.md"), "utf8")).toContain(`\n${refusal}\n`);
  // --answer-key verifier: main has no key, so Karotte's own grading of the solving run scores
  // step 2 0.0; denv's verifier, whose image has it, grades the same episode 1.0.
  const [, , , , keyLs = "x", keyRun = "", keyVerify = ""] = keyOut;
  expect(keyLs).toBe("");
  expect(keyRun).toContain("No such file or directory: '/root_data/expected.txt'");
  expect(keyRun).toMatch(/Result: failed, 1\/2 steps passed, final score 0$/m);
  expect(keyVerify).toMatch(/^reward\s+1$/m);
  expect(readFileSync(path.join(work, "karotte-key-denv/Containerfile.denv"), "utf8")).toContain(
    "RUN rm -rf /root_data /intermediate_data",
  );
  // The student's command (`...; id -u`) ran demoted, never as root.
  const uid = /stdout:\s*\n\s*(\d+)\s*\n/.exec(solvedRun)?.[1];
  expect(uid).toBeDefined();
  expect(Number(uid)).not.toBe(0);

  // What `karotte create-env` writes, made by karotte itself in the environment (uv, which only
  // locks the new environment's dependencies from PyPI there, is a no-op stub: no network), then
  // imported on this machine: refused on the template's first BuildKit step.
  const [create, importTemplate] = runnableLines("blog/karotte.md", "karotte-template");
  if (create === undefined || importTemplate === undefined) throw new Error("no karotte-template block");
  const stub =
    "mkdir -p /tmp/stub && printf '#!/bin/sh\\nexit 0\\n' > /tmp/stub/uv && chmod 755 /tmp/stub/uv";
  const made = await stack.denv([
    "exec",
    "karotte-hello/alpha",
    "--user",
    "root",
    "--cwd",
    "/tmp",
    "--",
    "sh",
    "-c",
    `${stub} && PATH=/tmp/stub:$PATH /root/.venv/bin/${create.line} >/tmp/create.log 2>&1 && tar cz my_env | base64 -w0`,
  ]);
  expect(made.code, made.stderr).toBe(0);
  writeFileSync(path.join(work, "my_env.tgz"), Buffer.from(made.stdout, "base64"));
  expect((await shell(`cd ${JSON.stringify(work)} && tar xzf my_env.tgz`)).code).toBe(0);
  const refused = await shell(`cd ${JSON.stringify(work)}\n${importTemplate.line}`);
  expect(refused.code).toBe(importTemplate.code);
  const page = readFileSync(path.join(repo, "docs/blog/karotte.md"), "utf8");
  expect(page).toContain(`\n${refused.stderr}`);
  expect(refused.stderr).toMatch(/^denv import karotte: my_env\/Containerfile: 'RUN --mount \(line \d+\)'/);

  // denv's verifier re-runs the judges and never reads the scores the run recorded: the idle
  // episode's transcript rewritten to claim 1.0 everywhere still grades 0.
  const forge = [
    "import json",
    "p = '/out/transcript.json'",
    "t = json.load(open(p))",
    "s = [e['scoring'] for e in t['events'] if e.get('type') == 'scoring']",
    "[x.update(score=1.0, continue_task=True) for x in s]",
    "json.dump(t, open(p, 'w'))",
    "print(len(s))",
  ].join("\n");
  const forged = await stack.denv([
    "exec",
    "karotte-hello/idle",
    "--",
    "/root/.venv/bin/python",
    "-c",
    forge,
  ]);
  expect(forged.stdout.trim(), forged.stderr).toBe("1");
  const again = await stack.json<{ status: string; reward: number; rewards: Record<string, number> }>([
    "verify",
    "karotte-hello/idle",
  ]);
  expect(again).toMatchObject({ status: "graded", reward: 0, rewards: { step_1: 0 } });

  const [confinement = "", answerKey = "", pidns = "", killChild = ""] = await runLines(check);
  const report = JSON.parse(
    confinement.slice(confinement.indexOf("{"), confinement.lastIndexOf("}") + 1),
  ) as {
    ok: boolean;
    findings: Array<{ name: string; value: string; ok: boolean | null }>;
  };
  expect(report.ok).toBe(false);
  expect(report.findings.filter((f) => f.ok === false).map((f) => f.name)).toEqual(["PID namespace"]);
  const passed = report.findings.filter((f) => f.ok === true).map((f) => f.name);
  expect(passed).toEqual(
    expect.arrayContaining(["student uid", "memory limit", "processes limit", "session uid"]),
  );
  expect(report.findings.find((f) => f.name === "sandbox")?.value).toBe("gvisor");
  expect(answerKey).toContain("Permission denied");
  // The capability is there (x-denv.agent.capabilities); what fails is gVisor's missing pidfd_open.
  expect(pidns).toBe("");
  expect(killChild).toContain("pidfd_open failed: Function not implemented");

  for (const name of ["solved", "idle", "cheat"]) {
    expect((await stack.denv(["env", "destroy", `karotte-hello/${name}`])).code).toBe(0);
  }
}, 1_500_000);
