import { spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

/** These tests run the built CLI, as a user would: `node packages/cli/dist/denv.mjs` (the bin). */
const repo = fileURLToPath(new URL("../../../", import.meta.url));
const cli = path.join(repo, "packages/cli/dist/denv.mjs");

let spec: typeof import("@denv/spec");
let tmp: string;

beforeAll(async () => {
  const tsc = createRequire(import.meta.url).resolve("typescript/bin/tsc");
  const build = spawnSync(process.execPath, [tsc, "-b", "packages/cli"], { cwd: repo, encoding: "utf8" });
  if (build.status !== 0) throw new Error(`tsc -b packages/cli failed:\n${build.stdout}${build.stderr}`);
  // Imported after the build: the CLI package sees @denv/spec through its built output.
  spec = await import("@denv/spec");
  tmp = mkdtempSync(path.join(os.tmpdir(), "denv-cli-validate-"));
});

afterAll(() => {
  if (tmp !== undefined) rmSync(tmp, { recursive: true, force: true });
});

interface Run {
  status: number | null;
  stdout: string;
  stderr: string;
}

function denv(args: string[], cwd: string, env: Record<string, string> = {}): Run {
  const run = spawnSync(process.execPath, [cli, ...args], {
    cwd,
    encoding: "utf8",
    env: { PATH: process.env.PATH ?? "", ...env },
  });
  return { status: run.status, stdout: run.stdout, stderr: run.stderr };
}

/** A project folder with files; returns its path. */
function project(name: string, files: Record<string, string>): string {
  const dir = path.join(tmp, name);
  for (const [rel, text] of Object.entries(files)) {
    mkdirSync(path.dirname(path.join(dir, rel)), { recursive: true });
    writeFileSync(path.join(dir, rel), text);
  }
  return dir;
}

/** Exactly one JSON object on stdout. */
function oneJson(stdout: string): Record<string, unknown> {
  const lines = stdout.trimEnd().split("\n");
  expect(lines).toHaveLength(1);
  const value: unknown = JSON.parse(lines[0] ?? "");
  expect(typeof value === "object" && value !== null && !Array.isArray(value)).toBe(true);
  return value as Record<string, unknown>;
}

const VALID = `
version: "3.8"
services:
  main:
    build: ./agent
    command: ["sleep", "infinity"]
    env_file: [agent.env]
    depends_on:
      db: {condition: service_healthy}
    mem_limit: 1g
  db:
    image: postgres:\${PG_TAG:-15}
    volumes: [pgdata:/var/lib/postgresql/data]
    healthcheck: {test: pg_isready, interval: 2s}
volumes:
  pgdata:
x-denv:
  verifier:
    image: python:3.12-slim
    command: [sh, /tests/test.sh]
    tests: tests
    submission: [/workspace/answer.txt]
`;

const VALID_FILES = {
  "compose.yaml": VALID,
  "agent/Dockerfile": "FROM ubuntu:24.04\n",
  "agent.env": "MODE=eval\n",
  ".env": "PG_TAG=16\n",
  "tests/test.sh": "echo 1 > /logs/verifier/reward.txt\n",
};

const REFUSED = `
services:
  main:
    image: ubuntu:24.04
    privileged: true
    volumes: [/var/run/docker.sock:/var/run/docker.sock]
    env_file: [link.env]
`;

describe("denv validate", () => {
  it("prints the normalized plan of a valid file and exits 0", () => {
    const dir = project("valid", VALID_FILES);
    const run = denv(["validate"], dir);
    expect(run.stderr).toBe("");
    expect(run.status).toBe(0);
    const out = run.stdout;
    expect(out).toContain("compose.yaml is valid");
    expect(out).toContain("project     valid (rl-environment)");
    expect(out).toContain("agent       service main, user 1000, workdir /workspace");
    // Start order: db before main.
    expect(out.indexOf("\n  db\n")).toBeGreaterThan(0);
    expect(out.indexOf("\n  db\n")).toBeLessThan(out.indexOf("\n  main\n"));
    expect(out).toContain("image       postgres:16");
    expect(out).toContain("image       denv-local/valid-main:latest (built from agent, Dockerfile)");
    expect(out).toContain("caps        memory 1 GiB, cpus 2, pids 1024");
    expect(out).toContain("caps        memory 2 GiB, cpus 2, pids 1024");
    expect(out).toContain("depends_on  db (service_healthy)");
    expect(out).toContain("tests       tests -> /tests");
    expect(out).toContain("submission  /workspace/answer.txt -> /submission/workspace/answer.txt");
    expect(out).toContain(`notes\n  ${spec.ComposeNotes.versionObsolete}\n`);
  });

  it("prints one JSON object with --json", () => {
    const dir = project("valid", VALID_FILES);
    const run = denv(["validate", "compose.yaml", "--json"], dir, { PG_TAG: "17" });
    expect(run.status).toBe(0);
    expect(run.stderr).toBe("");
    const result = oneJson(run.stdout);
    expect(result.ok).toBe(true);
    expect(result.notes).toEqual([spec.ComposeNotes.versionObsolete]);
    const plan = spec.Plan.parse(result.plan);
    expect(plan.services.map((s) => s.name)).toEqual(["db", "main"]);
    // The shell wins over the project's .env.
    expect(plan.services[0]?.image).toBe("postgres:17");
    expect(plan.services[1]?.environment).toEqual({ MODE: "eval" });
    expect(plan.agent).toEqual({ service: "main", user: "1000", workdir: "/workspace" });
  });

  it("prints every refusal on stderr, one a line, and exits 1", () => {
    const outside = project("outside", { "secret.env": "TOKEN=x\n" });
    const dir = project("refused", { "compose.yaml": REFUSED });
    // A symlink out of the project reads as missing: nothing outside the project is read.
    symlinkSync(path.join(outside, "secret.env"), path.join(dir, "link.env"));
    const run = denv(["validate"], dir);
    expect(run.status).toBe(1);
    expect(run.stdout).toBe("");
    expect(run.stderr.trimEnd().split("\n")).toEqual([
      spec.Refusal.serviceKey("main", "privileged", spec.ComposeReasons.privileged),
      spec.Refusal.serviceKey(
        "main",
        "volumes",
        spec.ComposeReasons.dockerSocket("/var/run/docker.sock:/var/run/docker.sock"),
      ),
      "service 'main': 'env_file' is refused: 'link.env' does not exist in the project",
    ]);

    const json = denv(["validate", "--json"], dir);
    expect(json.status).toBe(1);
    expect(json.stderr).toBe("");
    const result = oneJson(json.stdout);
    expect(result.ok).toBe(false);
    expect(result.refusals).toHaveLength(3);
  });

  it("finds docker-compose.yml when there is no compose.yaml", () => {
    const dir = project("legacy-name", { "docker-compose.yml": "services:\n  app:\n    image: alpine\n" });
    const run = denv(["validate"], dir);
    expect(run.status).toBe(0);
    expect(run.stdout).toContain("docker-compose.yml is valid");
  });

  it("names the file when it is missing or not YAML, and exits 1", () => {
    const dir = project("broken", { "bad.yaml": "services:\n  app: [1\n" });
    const missing = denv(["validate", "nope.yaml"], dir);
    expect(missing.status).toBe(1);
    expect(missing.stderr).toBe("denv validate: cannot read nope.yaml: no such file\n");
    const missingJson = denv(["validate", "nope.yaml", "--json"], dir);
    expect(missingJson.status).toBe(1);
    expect(oneJson(missingJson.stdout)).toEqual({
      ok: false,
      error: { code: "not_found", message: "cannot read nope.yaml: no such file" },
    });
    const none = denv(["validate"], path.join(dir, ".."));
    expect(none.status).toBe(1);
    expect(none.stderr).toContain("no compose file in");

    const bad = denv(["validate", "bad.yaml"], dir);
    expect(bad.status).toBe(1);
    expect(bad.stderr).toBe(
      "bad.yaml is not valid YAML: Flow sequence in block collection must be sufficiently indented and end with a ] (line 3, column 1)\n",
    );
  });

  it("exits 2 on bad usage", () => {
    const dir = project("usage", { "compose.yaml": "services:\n  app:\n    image: alpine\n" });
    for (const args of [["validate", "a.yaml", "b.yaml"], ["validate", "--nope"], [], ["frobnicate"]]) {
      const run = denv(args, dir);
      expect(run.status, args.join(" ")).toBe(2);
      expect(run.stderr, args.join(" ")).toMatch(/usage: denv|USAGE\n {2}denv <command>/);
    }
    const json = denv(["validate", "--nope", "--json"], dir);
    expect(json.status).toBe(2);
    expect(oneJson(json.stdout)).toEqual({
      ok: false,
      error: { code: "invalid_request", message: "unknown flag '--nope'" },
    });
    const help = denv(["validate", "--help"], dir);
    expect(help.status).toBe(0);
    expect(help.stdout).toContain("usage: denv validate [FILE] [--json]");
  });
});

describe("denv --help", () => {
  it("lists every command once, in parts headed as gh heads them, core first and additional last", async () => {
    const { COMMANDS, SECTIONS } = await import("./commands/index.js");
    const run = denv(["--help"], tmp);
    expect(run.status).toBe(0);
    expect(run.stderr).toBe("");
    const headings = [...run.stdout.matchAll(/^([A-Z ]+)$/gm)].map((m) => m[1]);
    expect(headings).toEqual(["USAGE", ...SECTIONS.map((s) => s.heading), "FLAGS", "LEARN MORE"]);
    expect(headings[1]).toBe("CORE COMMANDS");
    expect(headings.at(-3)).toBe("ADDITIONAL COMMANDS");
    const listed = [...run.stdout.matchAll(/^ {2}([a-z-]+): +\S/gm)].map((m) => m[1]);
    expect(listed).toEqual(COMMANDS.map((c) => c.name));
    expect(new Set(listed).size).toBe(listed.length);
    for (const section of SECTIONS) {
      const part = run.stdout.split(`\n${section.heading}\n`)[1]?.split("\n\n")[0] ?? "";
      for (const c of section.commands) expect(part, section.heading).toContain(`  ${c.name}: `);
    }
    expect(run.stdout).toContain("\nFLAGS\n  -h, --help   show this help\n  --version    print the version");
    // Bare `denv` prints the same on stderr and exits 2.
    const bare = denv([], tmp);
    expect(bare.status).toBe(2);
    expect(bare.stderr).toBe(run.stdout);
  });
});
