import { type ChildProcess, spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildDenvd, DENVD_MAIN, denvd, projectTar, REPO, wipeHost } from "./testing/agent-harness.js";
import { FakeCp } from "./testing/fake-cp.js";

/**
 * What an idle denvd holds (README, "Memory"): the real binary, with a preload that writes the
 * CommonJS modules the process has loaded (require.cache: every package, whether required or
 * imported) to a file when it gets SIGUSR2. dockerode and what it brings (ssh2, gRPC,
 * protobufjs), the compose validator's yaml and tar-stream wait for the first command that
 * needs them; the same list shows them after a deploy, so an empty answer cannot pass.
 */

const PRELOAD = `const { writeFileSync } = require("node:fs");
process.on("SIGUSR2", () => writeFileSync(process.env.MODULES_FILE, JSON.stringify(Object.keys(require.cache))));
`;

const WAITS_FOR_A_COMMAND = [
  "dockerode",
  "docker-modem",
  "ssh2",
  "@grpc/grpc-js",
  "protobufjs",
  "yaml",
  "tar-stream",
];

const STACK = `
services:
  main:
    image: debian:bookworm-slim
    command: ["sleep", "infinity"]
    init: true
`;

/** The packages (node_modules/NAME) among loaded module paths. */
function packages(paths: string[]): Set<string> {
  const out = new Set<string>();
  for (const p of paths) {
    const m = /.*node_modules\/((?:@[^/]+\/)?[^/]+)\//.exec(p);
    if (m?.[1]) out.add(m[1]);
  }
  return out;
}

describe("an idle denvd", () => {
  let cp: FakeCp;
  let dir = "";
  let stateDir = "";
  let child: ChildProcess | undefined;

  /** The packages the running denvd has loaded, as it lists them. */
  async function loaded(): Promise<Set<string>> {
    const file = join(dir, "modules.json");
    await rm(file, { force: true });
    child?.kill("SIGUSR2");
    for (let i = 0; i < 200 && !existsSync(file); i++) await new Promise((r) => setTimeout(r, 50));
    return packages(JSON.parse(await readFile(file, "utf8")) as string[]);
  }

  beforeAll(async () => {
    await buildDenvd();
    cp = await FakeCp.start();
    dir = await mkdtemp(join(tmpdir(), "denvd-idle-"));
    await writeFile(join(dir, "preload.cjs"), PRELOAD);
    stateDir = join("/var/lib/denvd-test", cp.hostId);
    const joined = await denvd(["join", "--url", cp.url, "--token", cp.token, "--state-dir", stateDir]);
    expect(joined.code).toBe(0);
    child = spawn(
      process.execPath,
      ["--require", join(dir, "preload.cjs"), DENVD_MAIN, "run", "--state-dir", stateDir],
      {
        cwd: REPO,
        env: {
          PATH: "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
          MODULES_FILE: join(dir, "modules.json"),
        },
        stdio: ["ignore", "ignore", "inherit"],
      },
    );
    await cp.waitFor((f) => f.type === "hello", 60_000);
  });
  afterAll(async () => {
    if (child && child.exitCode === null) {
      const exited = new Promise((r) => child?.once("exit", r));
      child.kill("SIGTERM");
      await exited;
    }
    await cp?.close();
    if (stateDir) await wipeHost(cp.hostId, stateDir);
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("has not loaded dockerode, yaml or tar-stream", async () => {
    const idle = await loaded();
    expect(idle.has("ws")).toBe(true);
    for (const name of WAITS_FOR_A_COMMAND) expect(idle.has(name), name).toBe(false);
  });

  it("loads them with the first command that needs them", async () => {
    const id = cp.command("env.deploy", { project: "idle", environment: "alpha", source_stream: "src" });
    await cp.write("src", await projectTar({ "compose.yaml": STACK }, true), "file");
    expect((await cp.result(id, 120_000)).ok).toBe(true);
    const busy = await loaded();
    for (const name of WAITS_FOR_A_COMMAND) expect(busy.has(name), name).toBe(true);
  });
});
