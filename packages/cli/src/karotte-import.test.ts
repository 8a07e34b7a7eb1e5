import { cpSync, existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { KarotteMessages, validateCompose } from "@denv/spec";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import YAML from "yaml";
import { missingKarottePython } from "./commands/import.js";
import {
  buildCli,
  denv,
  oneJson,
  projectFiles,
  pythonEnv,
  removeTempDirs,
  repo,
  tempDir,
} from "./testing/harness.js";

/**
 * `denv import karotte` (the denv Python package's mapping; python/tests/test_karotte_import.py
 * tests the mapping itself) on temp folders, no control plane. The live run is
 * e2e/karotte.test.ts.
 */

beforeAll(() => buildCli());
afterAll(() => removeTempDirs());

const hello = path.join(repo, "examples/karotte-hello");

describe("import karotte", () => {
  it("runs the denv Python package's importer and prints its result", async () => {
    const cwd = tempDir("karotte-out");
    const r = await denv(["import", "karotte", hello, "--out", "hello-denv", "--json"], {
      cwd,
      env: pythonEnv,
    });
    expect(r.status, r.stderr).toBe(0);
    expect(oneJson(r.stdout)).toMatchObject({
      directory: path.join(cwd, "hello-denv"),
      project: "karotte-hello",
      workdir: "/workdir",
      student_uid: 1000,
      services: ["main"],
    });
    const x = YAML.parse(readFileSync(path.join(cwd, "hello-denv/compose.yaml"), "utf8"))["x-denv"];
    expect(x.agent).toEqual({
      service: "main",
      user: "root",
      workdir: "/workdir",
      sandbox: "gvisor",
      capabilities: ["SYS_ADMIN", "SYS_PTRACE"],
    });
    expect(x.verifier.submission).toEqual(["/out"]);
    const text = await denv(["import", "karotte", hello, "--out", "second", "--project", "kh"], {
      cwd,
      env: pythonEnv,
    });
    expect(text.status, text.stderr).toBe(0);
    expect(text.stdout).toContain("project    kh\n");
    expect(text.stdout).toContain("student    1000\n");
    expect(text.stdout).toContain("next       denv deploy second");
  });

  it("writes a project inside denv's compose subset, with the answer key in the image or the verifier only", async () => {
    for (const key of ["image", "verifier"]) {
      const cwd = tempDir("karotte-out");
      const r = await denv(["import", "karotte", hello, "--out", "o", "--answer-key", key], {
        cwd,
        env: pythonEnv,
      });
      expect(r.status, r.stderr).toBe(0);
      const files = projectFiles(path.join(cwd, "o"));
      const result = validateCompose(files["compose.yaml"] ?? "", {
        env: {},
        readFile: (rel) => files[rel],
        exists: (rel) => rel === "." || Object.keys(files).some((f) => f === rel || f.startsWith(`${rel}/`)),
        projectName: "karotte-hello",
        source: "compose.yaml",
      });
      expect(result.ok ? [] : result.refusals).toEqual([]);
      const main = YAML.parse(files["compose.yaml"] ?? "").services.main;
      expect(main.build.dockerfile).toBe(key === "image" ? "Containerfile" : "Containerfile.denv");
      expect("Containerfile.denv" in files).toBe(key === "verifier");
    }
    const bad = await denv(["import", "karotte", hello, "--answer-key", "both"], {
      cwd: tempDir("karotte-out"),
    });
    expect(bad.status).toBe(2);
    expect(bad.stderr).toContain("--answer-key both: expected image or verifier");
  });

  it("makes the importer's refusal the CLI's error, in one line naming the file and the key", async () => {
    const env = path.join(tempDir("karotte-env"), "env");
    cpSync(hello, env, { recursive: true });
    const file = path.join(env, "Containerfile");
    writeFileSync(
      file,
      readFileSync(file, "utf8").replace(
        "COPY wheels/",
        "RUN --mount=type=cache,target=/c true\nCOPY wheels/",
      ),
    );
    const line =
      readFileSync(file, "utf8")
        .split("\n")
        .findIndex((l) => l.startsWith("RUN --mount")) + 1;
    const cwd = path.dirname(env);
    const r = await denv(["import", "karotte", "env", "--out", "o"], { cwd, env: pythonEnv });
    expect(r.status).toBe(1);
    expect(r.stderr).toBe(
      `denv import karotte: ${KarotteMessages.unsupported(
        "env/Containerfile",
        `RUN --mount (line ${line})`,
        "denv builds with Docker's classic builder, which has no BuildKit mounts, secrets or --chmod; install from files in the build context",
      )}\n`,
    );
    expect(existsSync(path.join(cwd, "o"))).toBe(false);
    mkdirSync(path.join(cwd, "full"));
    writeFileSync(path.join(cwd, "full/x"), "");
    const full = await denv(["import", "karotte", hello, "--out", "full", "--json"], { cwd, env: pythonEnv });
    expect(full.status).toBe(1);
    expect(oneJson(full.stdout)).toEqual({
      ok: false,
      error: { code: "conflict", message: KarotteMessages.notEmpty("full") },
    });
    const none = await denv(["import", "karotte", cwd, "--out", "o"], { cwd, env: pythonEnv });
    expect(none.stderr).toBe(
      `denv import karotte: ${KarotteMessages.missingFile(`${cwd}/pyproject.toml`)}\n`,
    );
  });

  it("says what to install when the Python lacks the denv package", async () => {
    const cwd = tempDir("karotte-out");
    const r = await denv(["import", "karotte", hello, "--out", "o"], {
      cwd,
      env: { DENV_PYTHON: "/nonexistent/python3" },
    });
    expect(r.status).toBe(1);
    expect(r.stderr).toBe(`denv import karotte: ${missingKarottePython("/nonexistent/python3")}\n`);
  });
});
