import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { createInterface } from "node:readline";
import { GithubMessages } from "@denv/spec";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runnableLines } from "./doc-blocks.js";
import { cli, repo, run, type Stack, startStack } from "./stack.js";

interface Github {
  url: string;
  appId: number;
  webhookSecret: string;
  privateKeyFile: string;
  token: string;
}

interface GithubState {
  deliveries: Array<{
    id: string;
    event: string;
    status: number;
    body: { outcome?: string; deployment?: string };
  }>;
  checkRuns: Array<{
    head_sha: string;
    status: string;
    conclusion?: string;
    history: string[];
    output?: { summary: string; text?: string };
  }>;
  gitRequests: Array<{ path: string; authorized: boolean }>;
}

/** GitHub on loopback, as the cp's testing/fake-github-main.js process (the CLI cannot import the cp). */
async function startGithub(dir: string): Promise<{ gh: Github; proc: ChildProcess }> {
  const main = path.join(repo, "packages/cp/dist/testing/fake-github-main.js");
  const proc = spawn(process.execPath, [main, dir, "acme/shop", "acme/blog"], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  const first = await new Promise<string>((resolve, reject) => {
    const rl = createInterface({ input: proc.stdout as NodeJS.ReadableStream });
    rl.once("line", resolve);
    proc.once("exit", (code) => reject(new Error(`fake GitHub exited ${code}`)));
  });
  return { gh: JSON.parse(first) as Github, proc };
}

/**
 * Push-to-deploy end to end: the real control plane and denvd (`denv up`) and the Docker engine,
 * GitHub on loopback (fake-github.ts). docs/how-to/push-to-deploy.md's `run: github` blocks run
 * as written: a real `git push` over smart HTTP makes GitHub deliver a signed push webhook, the
 * host fetches that commit with an installation token and deploys it, and the check run
 * completes. Then a commit whose compose file is refused fails its check run with the refusal,
 * and git URLs the host must not fetch are refused there, before anything is built.
 */
describe("docs/how-to/push-to-deploy.md against GitHub on loopback", () => {
  let gh: Github;
  let proc: ChildProcess | undefined;
  let stack: Stack;
  let work: string;
  let lineEnv: NodeJS.ProcessEnv;
  const state = async () => (await (await fetch(`${gh.url}/_fake/state`)).json()) as GithubState;
  const cloneUrl = () => `${gh.url}/acme/shop.git`;

  beforeAll(async () => {
    work = mkdtempSync(path.join(os.tmpdir(), "denv-push-"));
    ({ gh, proc } = await startGithub(work));
    stack = await startStack({
      env: {
        DENV_CP_GITHUB_APP_ID: String(gh.appId),
        DENV_CP_GITHUB_PRIVATE_KEY_FILE: gh.privateKeyFile,
        DENV_CP_GITHUB_WEBHOOK_SECRET: gh.webhookSecret,
        DENV_CP_GITHUB_API_URL: gh.url,
        DENV_CP_GITHUB_WEB_URL: gh.url,
      },
    });
    await fetch(`${gh.url}/_fake/webhook-url`, { method: "PUT", body: `${stack.url}/v1/github/webhook` });
    const basic = Buffer.from(`x-access-token:${gh.token}`).toString("base64");
    // What the person pushing has: their own git identity and credentials for the repository.
    lineEnv = {
      ...stack.env,
      GITHUB_URL: gh.url,
      GITHUB_API: gh.url,
      GITHUB_TOKEN: gh.token,
      WORK: work,
      GIT_CONFIG_GLOBAL: "/dev/null",
      GIT_CONFIG_NOSYSTEM: "1",
      GIT_AUTHOR_NAME: "octocat",
      GIT_AUTHOR_EMAIL: "octocat@example.invalid",
      GIT_COMMITTER_NAME: "octocat",
      GIT_COMMITTER_EMAIL: "octocat@example.invalid",
      GIT_CONFIG_COUNT: "1",
      GIT_CONFIG_KEY_0: "http.extraHeader",
      GIT_CONFIG_VALUE_0: `Authorization: Basic ${basic}`,
    };
  }, 300_000);
  afterAll(async () => {
    await stack?.close();
    proc?.kill("SIGTERM");
    if (proc && proc.exitCode === null) await new Promise((r) => proc?.once("exit", r));
    rmSync(work, { recursive: true, force: true });
  }, 180_000);

  const sh = (line: string) =>
    run(
      "bash",
      ["-c", `denv() { node ${JSON.stringify(cli)} "$@"; }\ncd ${JSON.stringify(repo)}\n${line}`],
      lineEnv,
    );

  it("runs the page's commands: connect, push, the deploy, the check run", async () => {
    let transcript = "";
    const lines = runnableLines("how-to/push-to-deploy.md", "github");
    expect(lines.length).toBeGreaterThan(8);
    for (const { line, code } of lines) {
      const r = await sh(line);
      transcript += `$ ${line}\n${r.stdout}${r.stderr}`;
      expect(r.code, `${line}\n${r.stdout}\n${r.stderr}`).toBe(code);
    }
    const head = (await sh(`git -C "$WORK/shop" rev-parse HEAD`)).stdout.trim();
    expect(transcript).toContain("project shop connected to acme/shop: pushes to main deploy shop/alpha");
    const gs = await state();
    const push = gs.deliveries.find((d) => d.event === "push");
    expect(push).toMatchObject({ status: 202, body: { outcome: "deployed" } });
    const id = push?.body.deployment as string;
    const d = await stack.json<{
      status: string;
      phases: Array<{ name: string; evidence?: Record<string, unknown> }>;
    }>(["deployments", "show", id]);
    expect(d.status).toBe("succeeded");
    const resolve = d.phases.find((p) => p.name === "resolve source");
    expect(resolve?.evidence?.git).toMatchObject({ url: cloneUrl(), commit: head });
    // The host fetched with an installation token (the fake serves git to valid tokens only).
    expect(gs.gitRequests.some((r) => r.path.endsWith("git-upload-pack") && r.authorized)).toBe(true);
    expect(gs.gitRequests.some((r) => !r.authorized && r.path.endsWith("git-upload-pack"))).toBe(false);
    // The check run, as the page's last command printed it.
    expect(transcript).toContain(`denv / alpha\ncompleted\nsuccess\n${stack.url}/deployments/${id}\n`);
    expect(transcript).toContain("| resolve source | succeeded |");
    expect(transcript).toMatch(/Version: `shop@v1`/);
    // The page's smoke verify: shop@v1 graded untouched on a fork before the switch.
    expect(transcript).toContain("    smoke: { expect: 0 }");
    expect(transcript).toContain("\nReward: 0\n");
    expect(transcript).toMatch(/\| smoke verify \| succeeded \| \d+\.\d s \| reward: 0 \|/);
    const smoke = d.phases.find((p) => p.name === "smoke verify");
    expect(smoke?.evidence).toMatchObject({
      status: "graded",
      reward: 0,
      expect: 0,
      verifier: { user: "1001" },
    });
    const run1 = gs.checkRuns.find((r) => r.head_sha === head);
    expect(run1?.history[0]).toBe("in_progress");
    // The control plane kept no copy of the source.
    expect(readdirOrEmpty(path.join(stack.dataDir, "spool"))).toEqual([]);
  }, 600_000);

  it("a pushed commit whose compose file is refused: the deploy fails at validate and the check run fails with the refusal line", async () => {
    const compose = path.join(work, "shop", "compose.yaml");
    writeFileSync(
      compose,
      readFileSync(compose, "utf8").replace(
        "  db:\n    build: ./db\n",
        "  db:\n    build: ./db\n    privileged: true\n",
      ),
    );
    for (const line of [
      `git -C "$WORK/shop" commit -qam "privileged db"`,
      `git -C "$WORK/shop" push -q origin HEAD:main`,
    ]) {
      const r = await sh(line);
      expect(r.code, r.stderr).toBe(0);
    }
    const head = (await sh(`git -C "$WORK/shop" rev-parse HEAD`)).stdout.trim();
    const run2 = await until(async () =>
      (await state()).checkRuns.find((r) => r.head_sha === head && r.status === "completed"),
    );
    expect(run2.conclusion).toBe("failure");
    expect(run2.output?.text).toContain("service 'db': 'privileged'");
    expect(run2.output?.summary).toMatch(/\| validate \| failed \|/);
    // alpha still runs the first commit's version.
    const env = await stack.json<{ version: string }>(["env", "show", "shop/alpha"]);
    expect(env.version).toBe("shop@v1");
  }, 300_000);

  it("the host refuses git URLs it must not fetch: file://, credentials in the URL, a redirect", async () => {
    const cases: Array<[string, string, string]> = [
      [
        "local",
        `file://${path.join(work, "shop")}`,
        GithubMessages.badGitUrl(`file://${path.join(work, "shop")}`),
      ],
      ["creds", `http://user:pw@127.0.0.1:1/x.git`, "only http(s):// URLs without credentials are fetched"],
      [
        "redirected",
        `${gh.url}/redirect/acme/shop.git`,
        GithubMessages.redirected(`${gh.url}/redirect/acme/shop.git`),
      ],
    ];
    for (const [name, url, message] of cases) {
      expect((await stack.denv(["projects", "create", name, "--repo", url])).code).toBe(0);
      const r = await stack.denv(["deploy", "--project", name, "--ref", "main"]);
      expect(r.code, r.stderr).toBe(1);
      expect(`${r.stdout}${r.stderr}`, name).toContain(message);
    }
  }, 120_000);

  it("docs/blog/creating-an-environment.md: the whole story as written — push, phases, fork, graded episodes, replay, rollback, a framework's sandbox and export", async () => {
    const lines = runnableLines("blog/creating-an-environment.md", "github");
    expect(lines.length).toBeGreaterThan(20);
    const out: Record<string, string> = {};
    for (const { line, code } of lines) {
      const r = await sh(line);
      out[line] = `${r.stdout}${r.stderr}`;
      expect(r.code, `${line}\n${r.stdout}\n${r.stderr}`).toBe(code);
    }
    const after = (prefix: string) => Object.entries(out).find(([l]) => l.startsWith(prefix))?.[1] ?? "";
    expect(after("denv projects connect-github acme/blog")).toContain(
      "project blog connected to acme/blog: pushes to main deploy blog/alpha",
    );
    // The pushed commit was deployed: its phases, the first version, alpha switched to it.
    const shown = after("denv deployments show");
    for (const phase of [
      "resolve source",
      "validate",
      "build",
      "place",
      "health",
      "probe",
      "snapshot",
      "switch",
    ])
      expect(shown).toContain(phase);
    expect(after("denv versions list blog")).toContain("blog@v1");
    // The fixed rollout grades 1, the untouched one 0, the replay of the fixed one 1 again.
    expect(out["denv verify blog/rollout-1"]).toMatch(/^reward +1$/m);
    expect(out["denv verify blog/rollout-2"]).toMatch(/^reward +0$/m);
    expect(after("denv replay blog/rollout-1")).toMatch(/^diverged +none$/m);
    expect(out["denv verify blog/rollout-1-replay"]).toMatch(/^reward +1$/m);
    // The rollback is the v1 disk state: the note written after v1 is gone.
    expect(after("denv exec blog/alpha -- sh -c 'cat")).toContain("no notes at v1");
    // A framework's view: a sandbox of blog@v1 ran a command, and the Harbor task folder exists.
    expect(after("python/.venv/bin/python -c").trim()).toBe("0");
    expect(after(`ls "$WORK/blog-task"`).split("\n")).toEqual(
      expect.arrayContaining(["environment", "instruction.md", "task.toml", "tests"]),
    );
  }, 600_000);
});

function readdirOrEmpty(dir: string): string[] {
  try {
    return readdirSync(dir);
  } catch {
    return [];
  }
}

async function until<T>(check: () => Promise<T | undefined>, timeoutMs = 120_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await check();
    if (v) return v;
    if (Date.now() > deadline) throw new Error("timed out");
    await new Promise((r) => setTimeout(r, 100));
  }
}
