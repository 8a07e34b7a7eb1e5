import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { BASE_IMAGE } from "../testing/harness.js";
import { alive, inContainer, killAll, killTree } from "./proc-tree.js";

const docker = (...args: string[]) => execFileSync("docker", args, { encoding: "utf8" }).trim();

/**
 * A host pid goes to another process once its own exits, so a pid listed in a container may name
 * anything on the host by the time it is signalled. These stand in for that moment: a pid that
 * is not (or no longer) the container's is handed to the killers, which must leave it alone.
 */
describe("host signals are scoped to the container they were listed in", () => {
  const name = `denv-proc-tree-${process.pid}`;
  let id = "";
  let host: ChildProcess;

  beforeAll(() => {
    id = docker(
      ...[
        "run",
        "-d",
        "--name",
        name,
        "--label",
        "ai.denv.managed=true",
        "--label",
        "ai.denv.test=proc-tree",
      ],
      ...[BASE_IMAGE, "sleep", "300"],
    );
    host = spawn("sleep", ["300"], { stdio: "ignore" });
  });
  afterAll(() => {
    host.kill("SIGKILL");
    docker("rm", "-f", name);
  });

  /** The host pid of a fresh `sleep` exec'd in the container, from the engine's own view. */
  const sleeper = async (): Promise<number> => {
    const before = new Set(docker("top", name, "-eo", "pid").split("\n").slice(1));
    spawn("docker", ["exec", name, "sleep", "300"], { stdio: "ignore" }).unref();
    for (let i = 0; i < 100; i++) {
      const fresh = docker("top", name, "-eo", "pid")
        .split("\n")
        .slice(1)
        .filter((p) => !before.has(p));
      if (fresh.length > 0) return Number(fresh[0]);
      await new Promise((r) => setTimeout(r, 50));
    }
    throw new Error("the exec never showed up in docker top");
  };

  it("tells the container's processes from the host's by cgroup", async () => {
    const inside = await sleeper();
    expect(await inContainer(inside, id)).toBe(true);
    expect(await inContainer(host.pid as number, id)).toBe(false);
    expect(await inContainer(process.pid, id)).toBe(false);
    await expect(inContainer(inside, id.slice(0, 12))).rejects.toThrow(
      `not a full container id: ${id.slice(0, 12)}`,
    );
  });

  it("killAll kills the container's pid and leaves a host process it was handed untouched", async () => {
    const inside = await sleeper();
    const left = await killAll([inside, host.pid as number], id, 500);
    expect(left).toEqual([]);
    expect(await alive(inside)).toBe(false);
    expect(await alive(host.pid as number)).toBe(true);
    // Not even stopped: SIGSTOP is scoped too.
    expect(
      execFileSync("ps", ["-o", "stat=", "-p", String(host.pid)], { encoding: "utf8" }).trim(),
    ).not.toMatch(/^T/);
  });

  it("killTree of a pid that is not the container's signals nothing", async () => {
    expect(await killTree(host.pid as number, id)).toEqual([]);
    expect(await alive(host.pid as number)).toBe(true);
    const inside = await sleeper();
    expect(await killTree(inside, id)).toEqual([inside]);
    for (let i = 0; i < 50 && (await alive(inside)); i++) await new Promise((r) => setTimeout(r, 20));
    expect(await alive(inside)).toBe(false);
  });
});
