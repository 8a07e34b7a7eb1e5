import { cpSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import path from "node:path";
import { validateCompose } from "@denv/spec";
import { afterAll, describe, expect, it } from "vitest";
import YAML from "yaml";
import { importHarborTask } from "./import-harbor-task.js";
import { mergeCompose, mergeHarborCompose } from "./merge-harbor-compose.js";
import { removeTempDirs, repo, tempDir } from "./testing/harness.js";

/** A task's compose file merged over Harbor's base compose, as denv.harbor does it. */

afterAll(() => removeTempDirs());

/** The fixture both merges are checked against (python/tests/test_harbor_compose.py too). */
const fixture = path.join(repo, "python/tests/harbor_merge");
const multi = path.join(repo, "examples/harbor-multi");
const load = (file: string) => YAML.parse(readFileSync(file, "utf8"));

describe("Harbor's compose merge", () => {
  it("merges the shared fixture to the document denv.harbor merges it to", () => {
    const expected = load(path.join(fixture, "expected-compose.yaml"));
    const merged = mergeHarborCompose(load(path.join(fixture, "environment/docker-compose.yaml")), {
      hasDockerfile: true,
      cpus: 2,
      memoryMb: 1024,
    });
    expect(merged.document).toEqual(expected.document);
    expect(merged.notes).toEqual(expected.notes);
  });

  it("follows docker compose's merge rules", () => {
    const base = {
      services: {
        a: {
          build: ".",
          command: ["sh", "-c", "sleep infinity"],
          environment: ["A=1", "B=2"],
          volumes: ["v:/data", "w:/w"],
          dns: ["1.1.1.1"],
          healthcheck: { test: ["CMD", "a"], interval: "1s" },
          depends_on: ["b"],
        },
      },
    };
    const over = {
      services: {
        a: {
          build: { dockerfile: "D" },
          command: ["run"],
          environment: { B: "3", C: null },
          volumes: [{ type: "volume", source: "x", target: "/data" }],
          dns: ["8.8.8.8", "1.1.1.1"],
          healthcheck: { test: ["CMD", "b"] },
          depends_on: { c: { condition: "service_healthy" } },
        },
        b: { image: "b" },
      },
    };
    const merged = mergeCompose(base, over) as { services: { a: Record<string, unknown> } };
    expect(merged.services.a).toEqual({
      build: { context: ".", dockerfile: "D" },
      command: ["run"],
      environment: { A: "1", B: "3", C: null },
      volumes: [{ type: "volume", source: "x", target: "/data" }, "w:/w"],
      dns: ["1.1.1.1", "8.8.8.8"],
      healthcheck: { test: ["CMD", "b"], interval: "1s" },
      depends_on: { b: { condition: "service_started" }, c: { condition: "service_healthy" } },
    });
    expect(base.services.a.environment).toEqual(["A=1", "B=2"]);
  });
});

describe("import harbor of a compose task that extends Harbor's base", () => {
  it("builds main from environment/Dockerfile, keeps the second service and records the drops", () => {
    const out = path.join(tempDir("harbor-out"), "fixture-denv");
    const r = importHarborTask(fixture, out, "fixture");
    expect(r.services).toEqual(["main", "cache"]);
    expect(r.notes).toEqual(load(path.join(fixture, "expected-compose.yaml")).notes);
    const c = load(path.join(out, "compose.yaml"));
    expect(c.services.main).toMatchObject({
      build: { context: "./environment", dockerfile: "Dockerfile.denv" },
      cpus: 2,
      mem_limit: "1024m",
      working_dir: "/app",
      volumes: ["data:/data"],
    });
    expect(c.services.main.image).toBeUndefined();
    expect(c.services.cache.build).toEqual({ context: "./environment/cache" });
    expect(c.services.cache.pull_policy).toBeUndefined();
    expect(readFileSync(path.join(out, "compose.yaml"), "utf8")).toContain(
      "# Merged over Harbor's base compose: services.cache.pull_policy: dropped",
    );
  });

  it("imports examples/harbor-multi, whose main has no build", () => {
    const out = path.join(tempDir("harbor-out"), "multi-denv");
    const r = importHarborTask(multi, out, "multi");
    expect(r.services).toEqual(["main", "kv"]);
    const c = load(path.join(out, "compose.yaml"));
    expect(c.services.main.build).toEqual({ context: "./environment", dockerfile: "Dockerfile.denv" });
    expect(c.services.main.depends_on).toEqual({ kv: { condition: "service_healthy" } });
    expect(c.services.kv.build).toEqual({ context: "./environment/kv" });
  });

  it("gives a compose file without main Harbor's main", () => {
    const dir = path.join(tempDir("harbor-task"), "task");
    cpSync(path.join(repo, "examples/harbor-hello"), dir, { recursive: true });
    writeFileSync(path.join(dir, "environment/docker-compose.yaml"), "services:\n  app: {image: x}\n");
    const out = path.join(tempDir("harbor-out"), "o");
    const c = load(path.join(importHarborTask(dir, out, "p").directory, "compose.yaml"));
    expect(Object.keys(c.services)).toEqual(["main", "app"]);
    expect(c.services.main.command).toEqual(["sh", "-c", "sleep infinity"]);
  });
});

/** The project folder's files (relative path -> text), for denv's compose validator. */
function projectFiles(dir: string, base = dir): Record<string, string> {
  const out: Record<string, string> = {};
  for (const name of readdirSync(dir)) {
    const p = path.join(dir, name);
    if (statSync(p).isDirectory()) Object.assign(out, projectFiles(p, base));
    else out[path.relative(base, p)] = readFileSync(p, "utf8");
  }
  return out;
}

it("the imported compose tasks are inside denv's compose subset", () => {
  for (const task of [fixture, multi, path.join(repo, "examples/harbor-shop")]) {
    const out = path.join(tempDir("harbor-out"), "o");
    importHarborTask(task, out, "p");
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
