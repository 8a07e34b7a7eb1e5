import { type ChildProcess, spawn } from "node:child_process";
import { readdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import type { HelloFrame } from "@denv/spec";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DockerClient } from "../docker/docker-client.js";
import { run } from "../host/run.js";
import {
  buildDenvd,
  DENVD_MAIN,
  denvd,
  labelledWith,
  projectTar,
  REPO,
  wipeHost,
} from "./testing/agent-harness.js";
import { FakeCp } from "./testing/fake-cp.js";

/**
 * The real binary, killed with SIGKILL in the middle of a deploy and started again: the command
 * is reconciled from the journal and the labels before the socket opens, answered when re-sent,
 * and never run twice.
 */

/** Becomes healthy only after a few seconds: the kill lands while denvd waits for health. */
const SLOW = `
services:
  main:
    image: debian:bookworm-slim
    command: ["sh", "-c", "sleep 4; touch /tmp/ready; exec sleep infinity"]
    init: true
    volumes: ["data:/data"]
    healthcheck:
      test: ["CMD", "test", "-f", "/tmp/ready"]
      interval: 1s
      retries: 30
volumes:
  data: {}
`;

function startRun(stateDir: string): {
  child: ChildProcess;
  stderr: () => string;
  exited: Promise<number | null>;
} {
  const child = spawn(process.execPath, [DENVD_MAIN, "run", "--state-dir", stateDir, "--store", "auto"], {
    cwd: REPO,
    env: { PATH: "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" },
    stdio: ["ignore", "ignore", "pipe"],
  });
  let err = "";
  child.stderr?.on("data", (b: Buffer) => {
    err += b.toString();
  });
  return {
    child,
    stderr: () => err,
    exited: new Promise((r) => child.on("exit", (code) => r(code))),
  };
}

describe("denvd killed mid-deploy", () => {
  let cp: FakeCp;
  let stateDir = "";
  const docker = new DockerClient();
  const children: ChildProcess[] = [];

  beforeAll(async () => {
    await buildDenvd();
    cp = await FakeCp.start();
    stateDir = join("/var/lib/denvd-test", cp.hostId);
    const joined = await denvd([
      "join",
      "--url",
      cp.url,
      "--token",
      cp.token,
      "--state-dir",
      stateDir,
      "--json",
    ]);
    expect(joined.code).toBe(0);
  });
  afterAll(async () => {
    for (const c of children) if (c.exitCode === null) c.kill("SIGKILL");
    await cp?.close();
    if (stateDir) await wipeHost(cp.hostId, stateDir);
  });

  it("reconciles the command at restart: nothing it created is left, and it never runs again", async () => {
    const first = startRun(stateDir);
    children.push(first.child);
    await cp.waitFor((f) => f.type === "hello", 60_000);
    const id = cp.command("env.deploy", { project: "slow", environment: "alpha", source_stream: "src" });
    await cp.write("src", await projectTar({ "compose.yaml": SLOW }, true), "file");
    await cp.waitFor((f) => f.type === "progress" && f.id === id && f.phase === "health", 60_000);
    const [net] = await docker.networks.list({ "ai.denv.command": id });
    first.child.kill("SIGKILL");
    await first.exited;
    expect(net).toBeDefined();
    expect(await labelledWith(docker, cp.hostId, id)).toEqual({ containers: 1, networks: 1, volumes: 1 });
    const journalled = await Promise.all(
      (await readdir(join(stateDir, "journal")))
        .filter((n) => n.endsWith(".json"))
        .map(
          async (n) =>
            JSON.parse(await readFile(join(stateDir, "journal", n), "utf8")) as { id: string; state: string },
        ),
    );
    expect(journalled.find((e) => e.id === id)?.state).toBe("started");

    const second = startRun(stateDir);
    children.push(second.child);
    const from = cp.frames.length;
    const hello = await cp.waitFor<HelloFrame>((f) => f.type === "hello", 60_000, from);
    expect(hello.unfinished).toEqual([]);
    expect(hello.environments).toEqual([]);
    expect(await labelledWith(docker, cp.hostId, id)).toEqual({ containers: 0, networks: 0, volumes: 0 });
    const rules = await run("iptables", ["-w", "-S", "INPUT"]);
    expect(rules.stdout).not.toContain(`denv:${(net?.id ?? "").slice(0, 12)}`);
    expect(second.stderr()).toMatch(new RegExp(`command reconciled id=${id} kind=env.deploy ok=false`));

    // The control plane re-sends the command after the reconnect: the recorded answer.
    cp.command("env.deploy", { project: "slow", environment: "alpha", source_stream: "src-again" }, { id });
    const result = await cp.result(id, 60_000, from);
    expect(result.ok).toBe(false);
    expect(result.error).toEqual({
      code: "interrupted",
      message: "denvd restarted during the command; what it created was removed",
    });
    expect(cp.frames.slice(from).filter((f) => f.type === "progress" && f.id === id)).toEqual([]);
    expect(await labelledWith(docker, cp.hostId, id)).toEqual({ containers: 0, networks: 0, volumes: 0 });

    // SIGTERM: stop taking commands, close the socket and the runtime, exit 0.
    second.child.kill("SIGTERM");
    expect(await second.exited).toBe(0);
    expect(second.stderr()).toMatch(/ stopping signal=SIGTERM\n/);
    expect(second.stderr()).not.toContain(cp.credential);
  });
});
