import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { BASE_IMAGE } from "../testing/harness.js";
import { run } from "./run.js";
import { sandboxProcesses } from "./runsc.js";

const docker = (...args: string[]) => execFileSync("docker", args, { encoding: "utf8" }).trim();
const ppidOf = (pid: number) => {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  return Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
};

/**
 * A gVisor sandbox can die under denvd (killed, or gVisor's kernel panicking); until the engine's
 * shim reaps it, runsc still reads the container as running and `runsc ps` fails with "connecting
 * to control server at PID N: connection refused". Such a sandbox has no process left: listing
 * it is empty, not an error that fails the verify's "stop agent" phase.
 */
describe("the processes of a gVisor sandbox", () => {
  let id = "";
  const root = "/var/run/docker/runtime-runc/moby";

  beforeAll(() => {
    id = docker(
      ...[
        "run",
        "-d",
        "--runtime",
        "runsc",
        "--label",
        "ai.denv.managed=true",
        "--label",
        "ai.denv.test=runsc",
      ],
      ...[BASE_IMAGE, "sleep", "300"],
    );
  });
  afterAll(() => {
    docker("rm", "-f", id);
  });

  it("are listed by sandbox pid while it runs, and none once it died, before the engine noticed", async () => {
    const before = await sandboxProcesses("runsc", id);
    expect(before.map((p) => p.pid)).toContain(1);
    const state = JSON.parse((await run("runsc", ["--root", root, "state", id])).stdout) as { pid: number };
    // The test's own container: its sandbox dies while the shim that would reap it is stopped.
    const shim = ppidOf(state.pid);
    process.kill(shim, "SIGSTOP");
    try {
      process.kill(state.pid, "SIGKILL");
      for (let i = 0; i < 100 && !readFileSync(`/proc/${state.pid}/stat`, "utf8").includes(") Z"); i++) {
        await new Promise((r) => setTimeout(r, 20));
      }
      const ps = await run("runsc", ["--root", root, "ps", id]);
      expect(ps.stderr).toContain(`connecting to control server at PID ${state.pid}: connection refused`);
      expect(await sandboxProcesses("runsc", id)).toEqual([]);
    } finally {
      process.kill(shim, "SIGCONT");
    }
  }, 60_000);
});
