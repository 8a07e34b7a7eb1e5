import { mkdirSync, writeFileSync } from "node:fs";
import path from "node:path";
import { type FakeControlPlane, startFakeControlPlane } from "@denv/sdk/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildCli, denv, oneJson, removeTempDirs, tempDir } from "./testing/harness.js";

let fake: FakeControlPlane;
let env: Record<string, string>;

beforeAll(async () => {
  buildCli();
  fake = await startFakeControlPlane();
  env = { DENV_URL: fake.url, DENV_TOKEN: fake.adminToken };
});
afterAll(async () => {
  await fake?.close();
  removeTempDirs();
});

function projectFolder(name: string, files: Record<string, string>): string {
  const dir = path.join(tempDir("deploy"), name);
  for (const [rel, text] of Object.entries(files)) {
    mkdirSync(path.dirname(path.join(dir, rel)), { recursive: true });
    writeFileSync(path.join(dir, rel), text);
  }
  return dir;
}

describe("denv deploy", () => {
  it("uploads the folder without .git, node_modules and what .dockerignore excludes", async () => {
    const dir = projectFolder("quickstart", {
      "compose.yaml": "services: {main: {build: ./app}}\n",
      ".env": "TAG=1\n",
      ".dockerignore": "*.log\napp/cache\n!app/cache/keep.txt\n.env\n",
      "app/Dockerfile": "FROM alpine\n",
      "app/main.py": "print(1)\n",
      "app/cache/big.bin": "x",
      "app/cache/keep.txt": "keep",
      "app/node_modules/x/index.js": "",
      "debug.log": "",
      "app/debug.log": "",
      ".git/HEAD": "ref: main\n",
    });
    const run = await denv(["deploy"], { env, cwd: dir });
    expect(run.status, run.stderr).toBe(0);
    expect(fake.state.lastUpload).toEqual([
      ".dockerignore",
      ".env",
      "app/Dockerfile",
      "app/cache/keep.txt",
      "app/debug.log",
      "app/main.py",
      "compose.yaml",
    ]);
    expect(run.stderr).toContain(`uploading ${dir} to quickstart/alpha\n`);
    expect(run.stderr).toContain("  build ...\n  build done (0.0s)\n");
    expect(run.stdout).toMatch(
      /^deployment dep_\d+ succeeded in [\d.]+s: deploy quickstart\/alpha\nversion quickstart@v2\nshow denv deployments show dep_\d+\nopen http:\/\/127\.0\.0\.1:\d+\/deployments\/dep_\d+$/m,
    );
  });

  it("shows the failed phase and the last log lines, and exits 1", async () => {
    const dir = projectFolder("quickstart", { "compose.yaml": "services: {main: {image: alpine}}\n" });
    fake.state.failures.push({
      kind: "deploy",
      phase: "health",
      code: "timeout",
      message: "service main is not healthy",
    });
    const run = await denv(["deploy", dir, "--env", "broken"], { env });
    expect(run.status).toBe(1);
    expect(run.stdout).toBe("");
    expect(run.stderr).toContain("  health failed (0.0s)\n");
    expect(run.stderr).toContain("last log lines of dep_");
    expect(run.stderr).toMatch(
      /denv deploy: deployment dep_\d+ failed in phase health: service main is not healthy\n$/,
    );

    fake.state.failures.push({ kind: "deploy", phase: "build", code: "docker", message: "build failed" });
    const json = await denv(["deploy", dir, "--env", "broken", "--json", "--verbose"], { env });
    expect(json.status).toBe(1);
    expect(oneJson(json.stdout)).toMatchObject({
      status: "failed",
      error: { code: "docker", message: "build failed" },
    });
    expect(json.stderr).toContain("    | build: done\n");
  });

  it("sends the file's x-denv.placement labels with --placement over them, and --target", async () => {
    const dir = projectFolder("quickstart", {
      "compose.yaml": "services: {main: {image: alpine}}\nx-denv: {placement: {gpu: t4, zone: eu}}\n",
    });
    const run = await denv(["deploy", dir, "--placement", "gpu=a100", "--placement", "disk=ssd"], { env });
    expect(run.status, run.stderr).toBe(0);
    expect(fake.state.lastPlacement).toBe("gpu=a100,zone=eu,disk=ssd");
    const plain = await denv(
      ["deploy", projectFolder("quickstart", { "compose.yaml": "services: {main: {image: alpine}}\n" })],
      { env },
    );
    expect(plain.status, plain.stderr).toBe(0);
    expect(fake.state.lastPlacement).toBeUndefined();
    expect(fake.state.lastTarget).toBeUndefined();
    const onCloud = await denv(["deploy", dir, "--target", "cloud"], { env });
    expect(onCloud.status, onCloud.stderr).toBe(0);
    expect(fake.state.lastTarget).toBe("cloud");
    const bad = await denv(["deploy", dir, "--placement", "gpu"], { env });
    expect(bad.status).toBe(2);
    expect(bad.stderr).toContain("--placement takes K=V (no commas), not 'gpu'");
  });

  it("deploys a git ref without uploading, and refuses a folder and a ref together", async () => {
    const run = await denv(["deploy", "--project", "quickstart", "--ref", "main", "--json"], { env });
    expect(run.status, run.stderr).toBe(0);
    expect(fake.state.lastUpload).toEqual([]);
    expect(run.stderr).toContain("deploying quickstart@main to quickstart/alpha");
    const both = await denv(["deploy", ".", "--ref", "main"], { env });
    expect(both.status).toBe(2);
    expect(both.stderr).toContain("give DIR or --ref, not both");
  });

  it("names a project that does not exist", async () => {
    const dir = projectFolder("ghost", { "compose.yaml": "services: {main: {image: alpine}}\n" });
    const run = await denv(["deploy", dir], { env });
    expect(run).toMatchObject({ status: 1 });
    expect(run.stderr).toContain("denv deploy: project 'ghost' does not exist");
  });
});

describe("denv deployments log", () => {
  it("follows a running deployment to its end", async () => {
    const started = oneJson(
      (await denv(["env", "snapshot", "quickstart/alpha", "--no-wait", "--json"], { env })).stdout,
    );
    const run = await denv(["deployments", "log", String(started.id), "--follow"], { env });
    expect(run.status).toBe(0);
    expect(run.stdout).toContain("  freeze ...\n    | freeze: done\n  freeze done");
    expect(run.stdout).toMatch(/deployment dep_\d+ succeeded in [\d.]+s: snapshot quickstart\/alpha\n$/);
  });
});
