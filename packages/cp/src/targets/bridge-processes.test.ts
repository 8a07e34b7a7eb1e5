import { spawn } from "node:child_process";
import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { jsonLog } from "../log.js";
import { BridgeProcesses } from "./bridge-driver.js";

const alive = async (pid: number) => {
  const stat = await readFile(`/proc/${pid}/stat`, "utf8").catch(() => "");
  return stat !== "" && !/^\d+ \(.*\) [ZX]/.test(stat);
};

describe("a bridge a previous control plane left running", () => {
  const cleanup: Array<() => Promise<void>> = [];
  afterEach(async () => {
    for (const f of cleanup.splice(0)) await f();
  });

  it("is adopted by its pid and stopped, but its pid is not signalled once it is another program", async () => {
    const dir = await mkdtemp(join(tmpdir(), "denv-bridges-"));
    cleanup.push(() => rm(dir, { recursive: true, force: true }));
    const machine = "m-left";
    await mkdir(join(dir, machine), { recursive: true });
    await writeFile(join(dir, machine, "bridge.json"), JSON.stringify({ machine, target: "t", labels: {} }));
    // Stands in for the bridge (its command line names the machine's state folder) and, on
    // SIGTERM, becomes another program under the same pid, as a reused pid would be.
    const bridge = spawn(
      "bash",
      ["-c", 'trap "exec sleep 300" TERM; while :; do sleep 0.05; done', join(dir, machine, "state")],
      { stdio: "ignore" },
    );
    const pid = bridge.pid as number;
    cleanup.push(async () => {
      bridge.kill("SIGKILL");
    });
    await writeFile(join(dir, machine, "pid"), String(pid));
    // A pid file naming a process that is not a bridge is not adopted, let alone signalled: that
    // machine's bridge is started anew (here a bundle that does not exist, which exits at once).
    const stranger = spawn("sleep", ["300"], { stdio: "ignore" });
    cleanup.push(async () => {
      stranger.kill("SIGKILL");
    });
    await mkdir(join(dir, "m-stranger"), { recursive: true });
    await writeFile(
      join(dir, "m-stranger", "bridge.json"),
      JSON.stringify({ machine: "m-stranger", target: "t", labels: {} }),
    );
    await writeFile(join(dir, "m-stranger", "pid"), String(stranger.pid));

    const bridges = new BridgeProcesses({
      dir,
      bundle: "/nonexistent/denvd.js",
      cpUrl: () => "http://127.0.0.1:1",
      log: jsonLog("silent"),
    });
    const listed = await bridges.provider("t", {}).list({});
    expect(listed.map((m) => m.machine).sort()).toEqual(["m-left", "m-stranger"]);
    expect(Number(await readFile(join(dir, "m-stranger", "pid"), "utf8"))).not.toBe(stranger.pid);
    await bridges.close();
    // SIGTERM went to the bridge, which turned into `sleep`: no SIGKILL follows to that pid.
    expect(await alive(pid)).toBe(true);
    expect((await readFile(`/proc/${pid}/cmdline`, "utf8")).split("\0")[0]).toBe("sleep");
    expect(await alive(stranger.pid as number)).toBe(true);
  });
});
