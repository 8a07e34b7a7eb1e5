import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { alive, DENVD_NODE_OPTIONS, stop } from "./local-stack.js";
import { removeTempDirs, repo, tempDir } from "./testing/harness.js";

// `denv up` starts denvd with the node options a host's unit gives it, so that the local stack
// holds what a host holds (packages/denvd/README.md, "Memory").
it("starts denvd with the node options of deploy/denvd.service", () => {
  const unit = readFileSync(path.join(repo, "deploy/denvd.service"), "utf8");
  const execStart = /^ExecStart=(.*)$/m.exec(unit)?.[1]?.split(" ") ?? [];
  const node = execStart.indexOf("node");
  const binary = execStart.indexOf("/usr/local/bin/denvd");
  expect(node).toBeGreaterThanOrEqual(0);
  expect(execStart.slice(node + 1, binary)).toEqual([...DENVD_NODE_OPTIONS]);
});

describe("stop (denv down)", () => {
  const spawned: number[] = [];
  afterEach(() => {
    for (const pid of spawned.splice(0)) {
      try {
        process.kill(pid, "SIGKILL");
      } catch {
        // gone
      }
    }
    removeTempDirs();
  });

  it("signals the pid only while it still runs the program: once it is another, no SIGKILL follows", async () => {
    // Stands in for denv-cp (its command line names the binary) and, on SIGTERM, becomes another
    // program under the same pid, as a pid the kernel gave to another process would be.
    const binary = path.join(tempDir("stack"), "denv-cp.js");
    const child = spawn("bash", ["-c", 'trap "exec sleep 300" TERM; while :; do sleep 0.05; done', binary], {
      stdio: "ignore",
      detached: true,
    });
    const pid = child.pid as number;
    spawned.push(pid);
    await new Promise((r) => setTimeout(r, 100));
    expect(await stop(pid, binary, 2_000)).toBe("stopped");
    expect(alive(pid)).toBe(true);
    expect(readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0")[0]).toBe("sleep");
  });

  it("kills the program when it ignores SIGTERM past the grace period", async () => {
    const binary = path.join(tempDir("stack"), "denvd.js");
    const child = spawn("bash", ["-c", 'trap "" TERM; while :; do sleep 0.05; done', binary], {
      stdio: "ignore",
      detached: true,
    });
    const pid = child.pid as number;
    spawned.push(pid);
    await new Promise((r) => setTimeout(r, 100));
    expect(await stop(pid, binary, 300)).toBe("killed");
    await new Promise<void>((r) =>
      child.exitCode !== null || child.signalCode !== null ? r() : child.once("exit", () => r()),
    );
    expect(child.signalCode).toBe("SIGKILL");
  });
});
