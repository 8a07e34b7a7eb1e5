import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import path from "node:path";
import { Protection, SpecialFileReasons } from "@denv/spec";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runnableLines } from "./doc-blocks.js";
import { cli, repo, run, type Stack, startStack } from "./stack.js";

const sha256 = (b: Buffer) => createHash("sha256").update(b).digest("hex");

/**
 * The commands of the how-to pages, run top to bottom against a real stack, so the pages cannot
 * drift from the code (doc-blocks.ts: which lines, and the exit code each must have).
 */

describe("docs/how-to pages run as written", () => {
  let stack: Stack;

  beforeAll(async () => {
    stack = await startStack();
    expect((await stack.denv(["projects", "create", "quickstart"])).code).toBe(0);
    const d = await stack.denv([
      "deploy",
      "examples/quickstart",
      "--project",
      "quickstart",
      "--env",
      "alpha",
    ]);
    expect(d.code, d.stderr).toBe(0);
  }, 300_000);
  afterAll(async () => stack?.close(), 180_000);

  async function runPage(page: string): Promise<string> {
    const lines = runnableLines(page);
    expect(lines.length).toBeGreaterThan(0);
    let transcript = "";
    for (const { line, code } of lines) {
      const r = await run(
        "bash",
        ["-c", `denv() { node ${JSON.stringify(cli)} "$@"; }\ncd ${JSON.stringify(repo)}\n${line}`],
        stack.env,
      );
      transcript += `$ ${line}\n${r.stdout}${r.stderr}`;
      expect(r.code, `${line}\n${r.stdout}\n${r.stderr}`).toBe(code);
    }
    return transcript;
  }

  it("how-to/snapshot-and-fork.md", async () => {
    const t = await runPage("how-to/snapshot-and-fork.md");
    expect(t).toContain("quickstart@v2");
    // rollout-2 still reads what the snapshot held after rollout-1 changed its own copy.
    const afterChange = t.split("$ denv exec quickstart/rollout-2 -- cat /workspace/notes.txt\n")[1] ?? "";
    expect(afterChange.startsWith("draft\n")).toBe(true);
    expect(t).toContain("no notes at v1");
  }, 300_000);

  it("how-to/verify.md", async () => {
    const t = await runPage("how-to/verify.md");
    expect(t).toMatch(/reward 1\b/);
    expect(t).toContain(Protection.specialFile("/workspace/app/leak", SpecialFileReasons.symlinkEscapes));
  }, 300_000);

  it("how-to/replay.md: a scripted episode replays with no divergence to the same reward; a nondeterministic step is found at its seq", async () => {
    const t = await runPage("how-to/replay.md");
    const after = (cmd: string) => t.split(`$ ${cmd}\n`)[1]?.split("\n$ ")[0] ?? "";
    // The log: three steps, the script's stdin kept as its digest, env values nowhere.
    const log = JSON.parse(after("denv episode quickstart/ep-1 --json")) as {
      total: number;
      started_from: string;
      steps: Array<{ exec: { stdin_bytes: number; stdin_sha256?: string; user?: string } }>;
    };
    expect(log.total).toBe(3);
    expect(log.started_from).toMatch(/^quickstart@v\d+$/);
    const script = readFileSync(path.join(repo, "examples/quickstart/agent/fix.sh"));
    expect(log.steps[1]?.exec).toMatchObject({ stdin_bytes: script.length, stdin_sha256: sha256(script) });
    const replayed = after("denv replay quickstart/ep-1 --name ep-1-replay");
    expect(replayed).toMatch(/^diverged +none$/m);
    expect(replayed.match(/^\d +exec +same\b/gm)).toHaveLength(3);
    // The same reward for the episode and for its replay.
    expect(after("denv verify quickstart/ep-1")).toMatch(/^reward +1$/m);
    expect(after("denv verify quickstart/ep-1-replay")).toMatch(/^reward +1$/m);
    const nd = after("denv replay quickstart/ep-2 --name ep-2-replay  # exits 1");
    expect(nd).toMatch(/^diverged +1, first at step 2$/m);
    expect(nd).toMatch(/^2 +exec +diverged +0 +0 +stdout +-$/m);
    expect(nd).toMatch(/^1 +exec +same\b/m);
    expect(nd).toMatch(/^3 +exec +same\b/m);
    // The Python client reads the same log and finds the same step.
    expect(t).toContain("3 steps: [0, 0, 0]");
    expect(t).toContain("diverged at step 2 on quickstart/ep-2-py");
    // Both replays of ep-2 are kept, newest first, each diverged at step 2.
    const kept = after("denv replays quickstart/ep-2").split("\n").slice(1).filter(Boolean);
    expect(kept.map((l) => l.split(/ {2,}/)[2])).toEqual(["quickstart/ep-2-py", "quickstart/ep-2-replay"]);
    for (const l of kept) expect(l).toMatch(/ +quickstart@v\d+ +3 +1, first at step 2$/);
    expect(t).toContain("kept replays: [('quickstart/ep-2-py', 2), ('quickstart/ep-2-replay', 2)]");
  }, 300_000);

  it("how-to/connect-a-target.md", async () => {
    const t = await runPage("how-to/connect-a-target.md");
    // A token is denvj_ and base64url: it may hold "-" (once in 64 runs, right after the prefix).
    expect(t).toMatch(/^token +denvj_[\w-]{43}$/m);
    expect(t).toContain("lab");
  }, 60_000);

  it("how-to/warm-pools.md: a sandbox claims a warm fork (pool: hit)", async () => {
    const t = await runPage("how-to/warm-pools.md");
    expect(t).toMatch(/pool quickstart: size 2 \(set\), 2 ready, 0 filling/);
    expect(t).toContain("pool: hit");
    expect(t).toMatch(/pool quickstart: size 0 \(set\), 0 ready/);
  }, 300_000);

  it("a warm fork whose host firewall was changed fails its probe at claim time and is destroyed, never handed out", async () => {
    const set = await stack.denv(["pools", "set", "quickstart", "1", "--wait"]);
    expect(set.code, set.stderr).toBe(0);
    const host = stack.hostId();
    const sh = (args: string[]) => run(args[0] as string, args.slice(1), process.env);
    // The one member's network. The page above emptied a pool of 2, whose members may still be
    // going: wait until theirs are gone, so that the tampered network is the member's.
    const poolNets = async () =>
      (
        await sh([
          "docker",
          "network",
          "ls",
          "--no-trunc",
          "--filter",
          `label=ai.denv.host=${host}`,
          "--format",
          '{{.ID}} {{.Label "ai.denv.environment"}}',
        ])
      ).stdout
        .split("\n")
        .map((l) => l.split(" "))
        .filter(([, env]) => env?.startsWith("quickstart/pool-"));
    let nets = await poolNets();
    for (const until = Date.now() + 60_000; nets.length > 1 && Date.now() < until; nets = await poolNets()) {
      await new Promise((r) => setTimeout(r, 250));
    }
    expect(nets.length, JSON.stringify(nets)).toBe(1);
    const [member] = nets;
    const [netId = "", memberEnv = ""] = member ?? [];
    // The tampering: every rule that rejects the environment's traffic to the host goes.
    const rules = (await sh(["iptables", "-w", "-S", "INPUT"])).stdout
      .split("\n")
      .filter((r) => r.includes(`denv:${netId.slice(0, 12)}`));
    expect(rules.length).toBeGreaterThan(0);
    for (const rule of rules) {
      const spec = rule
        .replace(/^-A /, "-D ")
        .split(" ")
        .map((a) => a.replace(/^"|"$/g, ""));
      const del = await sh(["iptables", "-w", ...spec]);
      expect(del.code, del.stderr).toBe(0);
    }

    const r = await stack.json<{ id: string; pool: string; evidence: { pool?: unknown } }>([
      "sandboxes",
      "create",
      "quickstart",
      "--name",
      "after-tamper",
    ]);
    expect(r.pool).toBe("miss");
    expect(r.evidence.pool).toBeUndefined();
    // The member is gone from the host, its network with it.
    const until = Date.now() + 60_000;
    for (;;) {
      const left = await sh(["docker", "ps", "-aq", "--filter", `label=ai.denv.environment=${memberEnv}`]);
      if (left.stdout.trim() === "") break;
      if (Date.now() > until) throw new Error(`pool member ${memberEnv} was not destroyed`);
      await new Promise((res) => setTimeout(res, 250));
    }
    expect((await stack.denv(["pools", "set", "quickstart", "0", "--wait"])).code).toBe(0);
    expect((await stack.denv(["sandboxes", "rm", "quickstart/after-tamper"])).code).toBe(0);
  }, 300_000);

  it("tutorials/quickstart.md shows only commands that scripts/quickstart runs", () => {
    const page = readFileSync(path.join(repo, "docs/tutorials/quickstart.md"), "utf8");
    const script = readFileSync(path.join(repo, "scripts/quickstart"), "utf8");
    const shown = [...page.matchAll(/^denv (.+)$/gm)].map((m) => (m[1] as string).trim());
    expect(shown.length).toBeGreaterThan(8);
    for (const cmd of shown) {
      // The script passes its own data dir and listen address, and asks for --json where it reads results.
      const words = cmd.split(" ").filter((w) => !/^<\w+>$/.test(w));
      const pattern = new RegExp(
        `denv ${words.map((w) => w.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")).join(" ")}`,
      );
      expect(script, `scripts/quickstart does not run 'denv ${cmd}'`).toMatch(pattern);
    }
  });
});
