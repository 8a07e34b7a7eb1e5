import { readFile } from "node:fs/promises";
import { fileURLToPath } from "node:url";
import { Protection, SpecialFileReasons } from "@denv/spec";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Runtime } from "./runtime/runtime.js";
import { leftovers, openTestRuntime } from "./testing/harness.js";

const QUICKSTART = fileURLToPath(new URL("../../../examples/quickstart", import.meta.url));

/** Writes a counter to the app's files and to the database, one after the other, every few ms. */
const WRITER = `
import os, socket, time
s = socket.create_connection(("db", 6379))
i = 0
while True:
    i += 1
    with open("/workspace/counter.tmp", "w") as f:
        f.write(str(i))
    os.replace("/workspace/counter.tmp", "/workspace/counter")
    v = str(i)
    s.sendall(("*3\\r\\n$3\\r\\nSET\\r\\n$7\\r\\ncounter\\r\\n$%d\\r\\n%s\\r\\n" % (len(v), v)).encode())
    assert s.recv(16).startswith(b"+OK")
    time.sleep(0.002)
`;

const READ_BOTH = `
import socket
s = socket.create_connection(("db", 6379))
s.sendall(b"*2\\r\\n$3\\r\\nGET\\r\\n$7\\r\\ncounter\\r\\n")
reply = s.recv(64).split(b"\\r\\n")
print(open("/workspace/counter").read(), reply[1].decode())
`;

describe("the quickstart environment end to end", () => {
  let rt: Runtime & AsyncDisposable;
  const env = "quickstart/alpha";

  beforeAll(async () => {
    rt = await openTestRuntime();
    await rt.deploy({ project: "quickstart", projectDir: QUICKSTART });
  });
  afterAll(async () => {
    await rt[Symbol.asyncDispose]();
  });

  it("grades the untouched environment 0.0 with a separate verifier on a fork", async () => {
    const agentSide = await rt.exec(env, { shell: "sleep 300 & (sleep 300 &); echo started" });
    expect(agentSide.stdout.toString()).toBe("started\n");
    const result = await rt.verify(env);
    expect(result.status).toBe("graded");
    expect(result.reward).toBe(0);
    // The agent's leftover processes were killed and confirmed gone before grading.
    expect(result.evidence.agent?.killed).toBeGreaterThanOrEqual(2);
    expect(result.evidence.agent?.survivors).toBe(0);
    const ps = await rt.exec(env, { cmd: ["sh", "-c", "ps -eo args | grep -c '^sleep 300' || true"] });
    expect(ps.stdout.toString().trim()).toBe("0");
    // Another principal, in another container, on a fork.
    expect(result.evidence.verifier.user).toBe("1001");
    const agentContainers = (await rt.environment(env)).services.map((s) => s.container_id);
    expect(agentContainers).not.toContain(result.evidence.verifier.container_id);
    expect(result.fork).not.toBe(env);
    expect(result.evidence.fork.environment).toBe(result.fork);
    expect(result.version).toMatch(/^quickstart@v\d+$/);
    expect(result.log).toContain("reward");
    // The fork was cleaned up; the agent's environment is still there.
    expect((await rt.list()).environments.map((e) => e.id)).toEqual([env]);
  });

  it("grades 1.0 after the scripted agent fixes the bug", async () => {
    const fix = await readFile(`${QUICKSTART}/agent/fix.sh`);
    const ran = await rt.exec(env, { cmd: ["bash", "-s"], stdin: fix });
    expect(ran.stderr.toString()).toBe("");
    expect(ran.exitCode).toBe(0);
    const result = await rt.verify(env);
    expect(result.status).toBe("graded");
    expect(result.reward).toBe(1);
    expect(result.evidence.submission).toEqual([
      expect.objectContaining({ path: "/workspace/app", entries: expect.any(Number) }),
    ]);
  });

  it("never lets the agent see the tests", async () => {
    const r = await rt.exec(env, {
      shell: "ls /tests 2>&1; find / -name test_app.py -not -path '/proc/*' 2>/dev/null | wc -l",
    });
    expect(r.stdout.toString()).toContain("No such file or directory");
    expect(r.stdout.toString().trim().endsWith("0")).toBe(true);
  });

  it("snapshots both services at one point: the fork's two counters agree", async () => {
    const writer = rt.exec(env, { cmd: ["python3", "-c", WRITER], timeout: 8 });
    await new Promise((r) => setTimeout(r, 1500));
    const version = await rt.snapshot(env);
    const fork = await rt.fork(version.id, { name: "consistency" });
    const r = await rt.exec(fork.id, { cmd: ["python3", "-c", READ_BOTH] });
    const [file = "", db = ""] = r.stdout.toString().trim().split(" ");
    // The writer writes the file first, then the database: at any single instant they differ by 0 or 1.
    expect(Number(file)).toBeGreaterThan(10);
    expect([0, 1]).toContain(Number(file) - Number(db));
    await rt.destroy(fork.id);
    await writer;
  });

  it("refuses a FIFO the agent planted in a submission path", async () => {
    await rt.exec(env, { shell: "mkfifo /workspace/app/pipe" });
    const result = await rt.verify(env);
    expect(result.status).toBe("refused");
    expect(result.reward).toBe(0);
    expect(result.message).toBe(Protection.specialFile("/workspace/app/pipe", SpecialFileReasons.fifo));
    expect(result.message).toBe(
      "refused: '/workspace/app/pipe' is a FIFO; special files are refused in uploads and submissions (protection 3)",
    );
    await rt.exec(env, { shell: "rm /workspace/app/pipe" });
  });

  it("refuses an escaping symlink the agent planted in a submission path", async () => {
    await rt.exec(env, { shell: "ln -s /etc/passwd /workspace/app/leak" });
    const result = await rt.verify(env);
    expect(result.status).toBe("refused");
    expect(result.message).toBe(
      Protection.specialFile("/workspace/app/leak", SpecialFileReasons.symlinkEscapes),
    );
    await rt.exec(env, { shell: "rm /workspace/app/leak" });
  });

  it("leaves nothing behind once destroyed", async () => {
    await rt.destroy(env);
    expect(await leftovers(rt)).toBe(0);
  });
});
