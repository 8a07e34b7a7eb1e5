import { cpSync, existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { HarborTaskMessages, validateCompose } from "@denv/spec";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import YAML from "yaml";
import { missingDenvPython, runHarborImporter } from "./commands/import.js";
import { exportHarborTask } from "./export-harbor-task.js";
import {
  buildCli,
  denv,
  oneJson,
  projectFiles,
  python,
  pythonEnv,
  removeTempDirs,
  repo,
  tempDir,
} from "./testing/harness.js";

/**
 * `denv import harbor` (the denv Python package's mapping, python/tests/test_harbor_import.py
 * tests it) and `denv export harbor`, on temp folders (no control plane).
 */

beforeAll(() => buildCli());
afterAll(() => removeTempDirs());

const hello = path.join(repo, "examples/harbor-hello");
const shop = path.join(repo, "examples/harbor-shop");
const multi = path.join(repo, "examples/harbor-multi");
/** The compose fixture both python/tests/test_harbor_compose.py and test_harbor_import.py use. */
const fixture = path.join(repo, "python/tests/harbor_merge");

/** A Python without the denv package: the venv's without its site-packages (-S) or PYTHONPATH (-I). */
function isolatedPython(dir: string): string {
  const wrapper = path.join(dir, "python-without-denv");
  writeFileSync(wrapper, `#!/bin/sh\nexec '${python}' -I -S "$@"\n`, { mode: 0o755 });
  return wrapper;
}

function copyTask(from: string): string {
  const dir = path.join(tempDir("harbor-task"), "task");
  cpSync(from, dir, { recursive: true });
  return dir;
}

const compose = (dir: string) => YAML.parse(readFileSync(path.join(dir, "compose.yaml"), "utf8"));

/** The Python importer, as `denv import harbor` runs it (a project folder to export). */
function importTask(dir: string, out: string, project: string) {
  return runHarborImporter(["--project", project, "--", dir, out], {
    cwd: process.cwd(),
    env: { ...process.env, ...pythonEnv },
  });
}

describe("import harbor", () => {
  it("runs the denv Python package's importer and prints its result", async () => {
    const cwd = tempDir("harbor-out");
    const r = await denv(["import", "harbor", hello, "--out", "hello-denv", "--json"], {
      cwd,
      env: pythonEnv,
    });
    expect(r.status, r.stderr).toBe(0);
    expect(oneJson(r.stdout)).toMatchObject({
      directory: path.join(cwd, "hello-denv"),
      project: "harbor-hello",
      workdir: "/app",
      services: ["main"],
      files: ["compose.yaml", "environment", "instruction.md", "solution", "task.toml", "tests"],
      notes: [],
    });
    const x = compose(path.join(cwd, "hello-denv"))["x-denv"];
    expect(x.agent).toEqual({ service: "main", user: "root", workdir: "/app", sandbox: "gvisor" });
    const text = await denv(["import", "harbor", shop, "--out", "shop", "--agent-sandbox", "none"], {
      cwd,
      env: pythonEnv,
    });
    expect(text.status, text.stderr).toBe(0);
    expect(text.stdout).toContain("services   main db");
    expect(compose(path.join(cwd, "shop"))["x-denv"].agent.user).toBe("1000");
  });

  it("makes the importer's refusal the CLI's error, in one line naming the file and the key", async () => {
    const dir = copyTask(hello);
    writeFileSync(path.join(dir, "task.toml"), "[environment]\ngpus = 1\n");
    const cwd = path.dirname(dir);
    const r = await denv(["import", "harbor", "task", "--out", "o"], { cwd, env: pythonEnv });
    expect(r.status).toBe(1);
    expect(r.stderr).toBe(
      `denv import harbor: ${HarborTaskMessages.unsupported("task/task.toml", "environment.gpus", "denv does not offer GPUs")}\n`,
    );
    expect(existsSync(path.join(cwd, "o"))).toBe(false);
    mkdirSync(path.join(cwd, "full"));
    writeFileSync(path.join(cwd, "full/x"), "");
    const full = await denv(["import", "harbor", hello, "--out", "full", "--json"], { cwd, env: pythonEnv });
    expect(full.status).toBe(1);
    expect(oneJson(full.stdout)).toEqual({
      ok: false,
      error: { code: "conflict", message: HarborTaskMessages.notEmpty("full") },
    });
  });

  it("says what to install when the Python lacks the denv package", async () => {
    const cwd = tempDir("harbor-out");
    for (const lacking of [isolatedPython(cwd), "/nonexistent/python3"]) {
      const r = await denv(["import", "harbor", hello, "--out", "o"], { cwd, env: { DENV_PYTHON: lacking } });
      expect(r.status).toBe(1);
      expect(r.stderr).toBe(`denv import harbor: ${missingDenvPython(lacking)}\n`);
    }
  });

  it("writes projects inside denv's compose subset", () => {
    for (const task of [fixture, multi, shop, hello]) {
      const out = path.join(tempDir("harbor-out"), "o");
      importTask(task, out, "p");
      const files = projectFiles(out);
      const result = validateCompose(files["compose.yaml"] ?? "", {
        env: {},
        readFile: (rel) => files[rel],
        exists: (rel) => rel === "." || Object.keys(files).some((f) => f === rel || f.startsWith(`${rel}/`)),
        projectName: "p",
        source: "compose.yaml",
      });
      expect(result.ok ? [] : result.refusals, task).toEqual([]);
    }
  });
});

describe("export harbor", () => {
  it("writes a Harbor task from an imported project: its test.sh, task.toml and the Dockerfile", () => {
    const src = path.join(tempDir("harbor-out"), "hello-denv");
    importTask(hello, src, "hello");
    const out = path.join(tempDir("harbor-out"), "task");
    const r = exportHarborTask(src, out, "hello@v1");
    expect(r).toMatchObject({ version: "hello@v1", service: "main" });
    expect(r.files).toEqual(["environment", "instruction.md", "solution", "task.toml", "tests"]);
    expect(readFileSync(path.join(out, "tests/test.sh"), "utf8")).toBe(
      readFileSync(path.join(hello, "tests/test.sh"), "utf8"),
    );
    expect(readFileSync(path.join(out, "environment/Dockerfile"), "utf8")).toContain("WORKDIR /app");
    expect(readFileSync(path.join(out, "task.toml"), "utf8")).toBe(
      readFileSync(path.join(hello, "task.toml"), "utf8"),
    );
  });

  it("writes test.sh and task.toml for a project with its own verifier", () => {
    const src = tempDir("harbor-src");
    writeFileSync(
      path.join(src, "compose.yaml"),
      "services:\n  app: {image: 'python:3.12-slim', working_dir: /work}\nx-denv:\n  verifier: {image: v, command: [python3, /tests/t.py], tests: ./tests, submission: /work/out, timeout: 60}\n",
    );
    writeFileSync(path.join(src, "instruction.md"), "do it\n");
    mkdirSync(path.join(src, "tests"));
    writeFileSync(path.join(src, "tests/t.py"), "print(1)\n");
    const out = path.join(tempDir("harbor-out"), "task");
    exportHarborTask(src, out, "p@v2");
    const test = readFileSync(path.join(out, "tests/test.sh"), "utf8");
    expect(test).toContain("ln -sfn '/work/out' '/submission/work/out'");
    expect(test).toContain("'python3' '/tests/t.py'");
    expect(existsSync(path.join(out, "tests/t.py"))).toBe(true);
    expect(readFileSync(path.join(out, "environment/Dockerfile"), "utf8")).toBe(
      "FROM python:3.12-slim\nWORKDIR /work\n",
    );
    const toml = readFileSync(path.join(out, "task.toml"), "utf8");
    expect(toml).toContain('workdir = "/work"');
    expect(toml).toContain("timeout_sec = 60.0");
  });

  it("round-trips a task with a database: main from environment/, db from its folder inside it", () => {
    const src = path.join(tempDir("harbor-out"), "shop-denv");
    importTask(shop, src, "shop");
    const out = path.join(tempDir("harbor-out"), "task");
    const r = exportHarborTask(src, out, "shop@v1");
    expect(r.service).toBe("main");
    const env = YAML.parse(readFileSync(path.join(out, "environment/docker-compose.yaml"), "utf8"));
    const original = YAML.parse(readFileSync(path.join(shop, "environment/docker-compose.yaml"), "utf8"));
    expect(env.services.main).toEqual({
      build: { context: "." },
      command: ["sleep", "infinity"],
      depends_on: { db: { condition: "service_healthy" } },
      working_dir: "/app",
    });
    expect(env.services.db).toEqual(original.services.db);
    expect(env.volumes).toEqual(original.volumes);
    for (const f of ["db/Dockerfile", "db/entrypoint.sh"]) {
      expect(readFileSync(path.join(out, "environment", f), "utf8")).toBe(
        readFileSync(path.join(shop, "environment", f), "utf8"),
      );
    }
    expect(readFileSync(path.join(out, "tests/expected.txt"), "utf8")).toBe(
      readFileSync(path.join(shop, "tests/expected.txt"), "utf8"),
    );
  });

  it("exports a denv project with more services: the agent becomes main under its own name too", () => {
    const src = tempDir("harbor-src");
    cpSync(path.join(repo, "examples/quickstart"), src, { recursive: true });
    writeFileSync(path.join(src, "instruction.md"), "Fix the shop's revenue endpoint.\n");
    const out = path.join(tempDir("harbor-out"), "task");
    const r = exportHarborTask(src, out, "quickstart@v1");
    expect(r.service).toBe("app");
    const env = YAML.parse(readFileSync(path.join(out, "environment/docker-compose.yaml"), "utf8"));
    expect(Object.keys(env.services)).toEqual(["main", "db"]);
    expect(env.services.main).toMatchObject({
      build: { context: "." },
      depends_on: { db: { condition: "service_healthy" } },
      networks: { default: { aliases: ["app"] } },
      working_dir: "/workspace",
    });
    // db's context (./db) is not inside app's (./app): it is copied to environment/db.
    expect(env.services.db.build).toEqual({ context: "./db" });
    expect(existsSync(path.join(out, "environment/db/Dockerfile"))).toBe(true);
    expect(readFileSync(path.join(out, "environment/Dockerfile"), "utf8")).toBe(
      readFileSync(path.join(src, "app/Dockerfile"), "utf8"),
    );
  });

  it("refuses what a Harbor task cannot hold", () => {
    const src = tempDir("harbor-src");
    writeFileSync(path.join(src, "instruction.md"), "x\n");
    writeFileSync(
      path.join(src, "compose.yaml"),
      "services:\n  main: {image: a}\n  db: {image: b, env_file: db.env}\nx-denv: {verifier: {image: v, command: [x]}}\n",
    );
    expect(() => exportHarborTask(src, path.join(src, "o"), "p@v1", { source: "S", out: "O" })).toThrow(
      "S/compose.yaml: 'services.db.env_file' cannot be mapped: export harbor cannot carry it into a Harbor task",
    );
    expect(existsSync(path.join(src, "o"))).toBe(false);
    writeFileSync(path.join(src, "compose.yaml"), "services:\n  main: {image: a}\n");
    expect(() => exportHarborTask(src, path.join(src, "o"), "p@v1", { source: "S", out: "O" })).toThrow(
      "S/compose.yaml: 'x-denv.verifier' cannot be mapped: missing; Harbor grades with tests/test.sh",
    );
  });
});
