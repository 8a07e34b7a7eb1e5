import { cpSync, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import { HarborTaskMessages } from "@denv/spec";
import { afterAll, describe, expect, it } from "vitest";
import YAML from "yaml";
import { dockerfileWorkdir } from "./denv-dockerfile.js";
import { exportHarborTask } from "./export-harbor-task.js";
import { importHarborTask } from "./import-harbor-task.js";
import { parseToml } from "./parse-toml.js";
import { removeTempDirs, repo, tempDir } from "./testing/harness.js";

/** `denv import harbor` / `denv export harbor` mapping, on temp folders (no control plane). */

afterAll(() => removeTempDirs());

const hello = path.join(repo, "examples/harbor-hello");
const shop = path.join(repo, "examples/harbor-shop");

function copyTask(from: string): string {
  const dir = path.join(tempDir("harbor-task"), "task");
  cpSync(from, dir, { recursive: true });
  return dir;
}

const compose = (dir: string) => YAML.parse(readFileSync(path.join(dir, "compose.yaml"), "utf8"));

describe("import harbor", () => {
  it("maps a Dockerfile task: main root in gVisor in the Dockerfile's WORKDIR, network_mode by phase, a root verifier", () => {
    const out = path.join(tempDir("harbor-out"), "hello-root");
    importHarborTask(hello, out, "hello");
    const x = compose(out)["x-denv"];
    expect(x.agent).toEqual({ service: "main", user: "root", workdir: "/app", sandbox: "gvisor" });
    // examples/harbor-hello says network_mode = "no-network": no egress in either phase.
    expect([x.egress, x.verifier.egress, x.verifier.user]).toEqual(["deny", "deny", "root"]);
    expect(x.verifier.build).toEqual({ context: "./environment", dockerfile: "Dockerfile.denv" });
    const df = readFileSync(path.join(out, "environment/Dockerfile.denv"), "utf8");
    expect(df).toContain("RUN mkdir -p '/app' /logs/agent /logs/artifacts /logs/verifier /tests /solution\n");
    expect(df).not.toContain("chown");
    // Harbor's default network_mode (public) per phase: the package mirrors through the proxy.
    const dir = copyTask(hello);
    const toml = readFileSync(path.join(dir, "task.toml"), "utf8").replace(/^network_mode = .*\n/m, "");
    writeFileSync(
      path.join(dir, "task.toml"),
      toml.replace("[agent]\n", '[agent]\nnetwork_mode = "no-network"\n'),
    );
    const pub = path.join(tempDir("harbor-out"), "hello-public");
    importHarborTask(dir, pub, "hello");
    const p = compose(pub)["x-denv"];
    expect([p.egress, p.verifier.egress]).toEqual(["deny", "mirrors"]);
  });

  it("maps a Dockerfile task with --agent-sandbox none: main as uid 1000, the verifier runs test.sh", () => {
    const out = path.join(tempDir("harbor-out"), "hello-denv");
    const r = importHarborTask(hello, out, "hello", { dir: hello, out }, { agentSandbox: "none" });
    expect(r).toMatchObject({ project: "hello", workdir: "/app", services: ["main"] });
    const c = compose(out);
    expect(c.name).toBe("hello");
    expect(c.services.main).toMatchObject({
      build: { context: "./environment", dockerfile: "Dockerfile.denv" },
      working_dir: "/app",
    });
    expect(c["x-denv"].agent).toEqual({ service: "main", user: "1000", workdir: "/app" });
    expect(c["x-denv"].verifier).toMatchObject({
      build: {
        context: "./environment",
        dockerfile: "Dockerfile.denv",
        args: { DENV_WORKDIR_OWNER: "1001" },
      },
      user: "1001",
      timeout: 120,
      tests: "./tests",
      submission: ["/app"],
    });
    expect(c["x-denv"].verifier.command.at(-1)).toContain("exec bash /tests/test.sh");
    const df = readFileSync(path.join(out, "environment/Dockerfile.denv"), "utf8");
    expect(df.startsWith("FROM debian:bookworm-slim\nWORKDIR /app\n")).toBe(true);
    expect(df).toContain("ARG DENV_WORKDIR_OWNER=1000");
    for (const f of ["instruction.md", "task.toml", "tests/test.sh", "solution/solve.sh"]) {
      expect(existsSync(path.join(out, f)), f).toBe(true);
    }
  });

  it("maps a compose task: the other services stay, main gets Dockerfile.denv, task.toml's workdir wins", () => {
    const out = path.join(tempDir("harbor-out"), "shop-denv");
    const r = importHarborTask(shop, out, "shop");
    expect(r.services).toEqual(["main", "db"]);
    const c = compose(out);
    expect(c.services.db.build).toEqual({ context: "./environment/db" });
    expect(c.services.main.build).toEqual({ context: "./environment", dockerfile: "Dockerfile.denv" });
    expect(c.services.main.depends_on).toEqual({ db: { condition: "service_healthy" } });
    expect(c.volumes).toEqual({ shopdata: {} });
    expect(c["x-denv"].agent.workdir).toBe("/app");
  });

  it("refuses what it cannot map, in one line naming the file and the key", () => {
    const cases: [string, (dir: string) => void, string][] = [
      [
        "unknown verifier mode",
        (d) => writeFileSync(path.join(d, "task.toml"), '[verifier]\nenvironment_mode = "elsewhere"\n'),
        HarborTaskMessages.unsupported(
          "T/task.toml",
          "verifier.environment_mode",
          `'elsewhere' (expected "shared" or "separate")`,
        ),
      ],
      [
        "separate verifier with an environment of its own",
        (d) => writeFileSync(path.join(d, "task.toml"), '[verifier.environment]\ndocker_image = "v"\n'),
        "T/task.toml: 'verifier.environment' cannot be mapped: a verifier environment of its own (denv's verifier is the task's image built again)",
      ],
      [
        "separate verifier with an image of its own",
        (d) => {
          writeFileSync(path.join(d, "task.toml"), '[verifier]\nenvironment_mode = "separate"\n');
          writeFileSync(path.join(d, "tests/Dockerfile"), "FROM x\n");
        },
        "T/tests/Dockerfile: 'tests/Dockerfile' cannot be mapped: a verifier environment of its own (denv's verifier is the task's image built again)",
      ],
      [
        "separate verifier with a relative artifact",
        (d) =>
          writeFileSync(
            path.join(d, "task.toml"),
            'artifacts = ["out.txt"]\n[verifier]\nenvironment_mode = "separate"\n',
          ),
        `T/task.toml: 'artifacts' cannot be mapped: "out.txt" (a separate verifier's artifacts must be absolute paths)`,
      ],
      [
        "gpus",
        (d) => writeFileSync(path.join(d, "task.toml"), "[environment]\ngpus = 1\n"),
        "T/task.toml: 'environment.gpus' cannot be mapped: denv does not offer GPUs",
      ],
      [
        "allowlist",
        (d) => writeFileSync(path.join(d, "task.toml"), '[verifier]\nnetwork_mode = "allowlist"\n'),
        "T/task.toml: 'verifier.network_mode' cannot be mapped: 'allowlist' (an rl-environment reaches no host but the package mirrors)",
      ],
      [
        "bad toml",
        (d) => writeFileSync(path.join(d, "task.toml"), '[agent]\nuser = "root\n'),
        "T/task.toml:2: ",
      ],
      [
        "no tests",
        (d) => rmSync(path.join(d, "tests"), { recursive: true }),
        "T/tests/test.sh: missing; a Harbor task needs it",
      ],
      [
        "no environment",
        (d) => rmSync(path.join(d, "environment"), { recursive: true }),
        "T/environment: no Dockerfile, no docker-compose.yaml and no [environment] docker_image in task.toml",
      ],
      [
        // Harbor's base gives main its build from environment/Dockerfile: without one, nothing does.
        "compose without a main to build",
        (d) => {
          rmSync(path.join(d, "environment/Dockerfile"));
          writeFileSync(path.join(d, "environment/docker-compose.yaml"), "services:\n  app: {image: x}\n");
        },
        "T/environment/docker-compose.yaml: 'services.main' cannot be mapped: has neither build nor image",
      ],
    ];
    for (const [name, mutate, message] of cases) {
      const dir = copyTask(hello);
      mutate(dir);
      const out = path.join(tempDir("harbor-out"), "o");
      expect(() => importHarborTask(dir, out, "p", { dir: "T", out: "O" }), name).toThrow(message);
    }
  });

  it("maps a separate verifier: the artifacts are its submission, put back where the agent left them", () => {
    const dir = copyTask(hello);
    writeFileSync(
      path.join(dir, "task.toml"),
      'artifacts = ["/app/hello.txt", "/srv/out/"]\n\n[verifier]\nenvironment_mode = "separate"\n',
    );
    const out = path.join(tempDir("harbor-out"), "o");
    importHarborTask(dir, out, "p", { dir, out }, { agentSandbox: "none" });
    const verifier = compose(out)["x-denv"].verifier;
    expect(verifier.submission).toEqual(["/app/hello.txt", "/srv/out"]);
    const script = verifier.command[2] as string;
    expect(script).toContain(
      "elif [ -e '/submission/app/hello.txt' ]; then cp --preserve=mode,timestamps '/submission/app/hello.txt' '/app/hello.txt'; fi;",
    );
    expect(script).toContain(
      "if [ -d '/submission/srv/out' ]; then mkdir -p '/srv/out' && cp -R --preserve=mode,timestamps '/submission/srv/out'/. '/srv/out'/;",
    );
    expect(script.endsWith("exec bash /tests/test.sh")).toBe(true);
    // /srv exists in both images, owned by the image's user (the workdir /app already is).
    const dockerfile = readFileSync(path.join(out, "environment/Dockerfile.denv"), "utf8");
    expect(dockerfile).toContain("mkdir -p '/app' '/srv' /logs/agent");
    // biome-ignore lint/suspicious/noTemplateCurlyInString: a Dockerfile build argument
    expect(dockerfile).toContain("chown -R ${DENV_WORKDIR_OWNER}:${DENV_WORKDIR_OWNER} '/app' '/srv';");
  });

  it("refuses a non-empty OUT", () => {
    const out = tempDir("harbor-out");
    writeFileSync(path.join(out, "x"), "");
    expect(() => importHarborTask(hello, out, "p", { dir: "T", out: "O" })).toThrow(
      HarborTaskMessages.notEmpty("O"),
    );
  });

  it("reads task.toml and Dockerfile WORKDIRs", () => {
    expect(parseToml('a = 1\n[environment]\nworkdir = "/w" # c\ntags = ["x", "y"]\n', "f")).toEqual({
      "": { a: 1 },
      environment: { workdir: "/w", tags: ["x", "y"] },
    });
    expect(dockerfileWorkdir("FROM x\nWORKDIR /a\nworkdir /b\n")).toBe("/b");
    expect(dockerfileWorkdir("FROM x\nWORKDIR $HOME\n")).toBeUndefined();
  });
});

describe("export harbor", () => {
  it("writes a Harbor task from an imported project: its test.sh, task.toml and the Dockerfile", () => {
    const src = path.join(tempDir("harbor-out"), "hello-denv");
    importHarborTask(hello, src, "hello");
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
    importHarborTask(shop, src, "shop");
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

describe("import harbor without a sandbox", () => {
  it("refuses a root agent in one line", () => {
    const dir = copyTask(hello);
    writeFileSync(path.join(dir, "task.toml"), '[agent]\nuser = "root"\n');
    expect(() =>
      importHarborTask(
        dir,
        path.join(tempDir("harbor-out"), "o"),
        "p",
        { dir: "T", out: "O" },
        { agentSandbox: "none" },
      ),
    ).toThrow(
      "T/task.toml: 'agent.user' cannot be mapped: root without --agent-sandbox gvisor (the agent is never root outside a sandbox, protection 1)",
    );
  });
});
