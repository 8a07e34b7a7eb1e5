import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { createServer, type Server } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  Daytona,
  DaytonaAuthenticationError,
  DaytonaNotFoundError,
  Image,
  type Sandbox,
} from "@daytonaio/sdk";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type DaytonaDouble, startDaytonaDouble } from "./daytona-double.js";

/**
 * The Daytona double driven by the real `@daytonaio/sdk`, nothing mocked: snapshots are builds on
 * this machine's engine (FROM debian:bookworm-slim, local; never pulled), sandboxes containers.
 */
let double: DaytonaDouble;
let daytona: Daytona;
let dir: string;
const SNAPSHOT = "with-user";

beforeAll(async () => {
  double = await startDaytonaDouble();
  daytona = new Daytona(double.config);
  dir = await mkdtemp(join(tmpdir(), "denv-daytona-"));
  await writeFile(join(dir, "greeting.txt"), "hello from the context\n");
  await writeFile(
    join(dir, "Dockerfile"),
    "FROM debian:bookworm-slim\nRUN useradd -m -u 1000 -s /bin/bash agent\nCOPY greeting.txt /opt/greeting.txt\n",
  );
  const logs: string[] = [];
  const snap = await daytona.snapshot.create(
    { name: SNAPSHOT, image: Image.fromDockerfile(join(dir, "Dockerfile")) },
    { onLogs: (l) => logs.push(l) },
  );
  expect(snap.state).toBe("active");
  expect(logs.join("\n")).toContain("COPY greeting.txt /opt/greeting.txt");
}, 180_000);

afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
  await daytona?.[Symbol.asyncDispose]();
  await double?.close();
  expect(double.leftovers()).toEqual([]);
}, 120_000);

describe("DaytonaServer with @daytonaio/sdk", { timeout: 120_000 }, () => {
  it("builds a snapshot from a Dockerfile with a context, and runs a sandbox of it as its user", async () => {
    expect((await daytona.snapshot.get(SNAPSHOT)).name).toBe(SNAPSHOT);
    expect((await daytona.snapshot.list()).items.map((s) => s.name)).toContain(SNAPSHOT);
    const sb = await daytona.create({ snapshot: SNAPSHOT, user: "agent", envVars: { FROM_CREATE: "yes" } });
    try {
      expect(sb.state).toBe("started");
      expect(sb.user).toBe("agent");
      const id = await sb.process.executeCommand("id -u");
      expect(id).toMatchObject({ exitCode: 0, result: "1000\n" });
      expect((await sb.process.executeCommand("cat /opt/greeting.txt")).result).toBe(
        "hello from the context\n",
      );
      expect((await sb.process.executeCommand("pwd")).result).toBe("/home/agent\n");

      const r = await sb.process.executeCommand(
        'pwd; echo "$GREETING $FROM_CREATE"; echo err >&2; exit 3',
        "/tmp",
        {
          GREETING: "hi",
        },
      );
      expect(r.exitCode).toBe(3);
      expect(r.result).toBe("/tmp\nhi yes\nerr\n");

      const started = Date.now();
      await expect(sb.process.executeCommand("sleep 1; sleep 30", undefined, undefined, 2)).rejects.toThrow(
        "command execution timeout",
      );
      expect(Date.now() - started).toBeLessThan(10_000);
      const ps = await sb.process.executeCommand("ps -eo args || cat /proc/[0-9]*/cmdline");
      expect(ps.result).not.toContain("sleep 30");
    } finally {
      await sb.delete();
    }
  });

  it("uploads, downloads, lists, stats and deletes files as the sandbox user", async () => {
    const sb = await daytona.create({ snapshot: SNAPSHOT, user: "agent" });
    try {
      const bytes = Buffer.from(Array.from({ length: 256 }, (_, i) => i));
      await sb.fs.uploadFile(bytes, "data/blob.bin");
      await sb.fs.uploadFiles([
        { source: Buffer.from("one"), destination: "/tmp/one.txt" },
        { source: Buffer.from("two"), destination: "/tmp/two.txt" },
      ]);
      expect(await sb.fs.downloadFile("/home/agent/data/blob.bin")).toEqual(bytes);
      expect((await sb.process.executeCommand("stat -c '%U %s' data/blob.bin")).result).toBe("agent 256\n");
      const both = await sb.fs.downloadFiles([{ source: "/tmp/one.txt" }, { source: "/tmp/missing.txt" }]);
      expect(both[0]?.result?.toString()).toBe("one");
      expect(both[1]?.error).toContain("No such file");
      await expect(sb.fs.downloadFile("/tmp/missing.txt")).rejects.toBeInstanceOf(DaytonaNotFoundError);

      await sb.fs.createFolder("made/deep", "750");
      const listed = await sb.fs.listFiles("/home/agent");
      expect(
        listed.filter((f) => f.name === "data" || f.name === "made").map((f) => [f.name, f.isDir, f.owner]),
      ).toEqual(
        expect.arrayContaining([
          ["data", true, "agent"],
          ["made", true, "agent"],
        ]),
      );
      const info = await sb.fs.getFileDetails("data/blob.bin");
      expect(info).toMatchObject({ name: "blob.bin", isDir: false, size: 256, owner: "agent" });
      await sb.fs.setFilePermissions("data/blob.bin", { mode: "600" });
      expect((await sb.fs.getFileDetails("data/blob.bin")).permissions).toBe("0600");

      await expect(sb.fs.uploadFile(Buffer.from("x"), "/root/nope.txt")).rejects.toThrow(/Permission denied/);
      await expect(sb.fs.deleteFile("made")).rejects.toThrow(/directory/);
      await sb.fs.deleteFile("made", true);
      await sb.fs.deleteFile("data/blob.bin");
      await expect(sb.fs.getFileDetails("data/blob.bin")).rejects.toBeInstanceOf(DaytonaNotFoundError);
    } finally {
      await sb.delete();
    }
  });

  it("runs session commands as one shell would, streams their stdout and stderr apart, and in the background", async () => {
    const sb = await daytona.create({ snapshot: SNAPSHOT, user: "agent" });
    try {
      await sb.process.createSession("s1");
      await sb.process.executeSessionCommand("s1", { command: "cd /tmp && export SEEN=kept" });
      const same = await sb.process.executeSessionCommand("s1", { command: 'pwd; echo "$SEEN"; id -un' });
      expect(same).toMatchObject({ exitCode: 0, stdout: "/tmp\nkept\nagent\n" });

      const { cmdId } = await sb.process.executeSessionCommand("s1", {
        command: "echo one; sleep 0.5; echo two >&2; sleep 0.5; echo three; exit 4",
        runAsync: true,
      });
      expect((await sb.process.getSessionCommand("s1", cmdId)).exitCode).toBeUndefined();
      const out: string[] = [];
      const err: string[] = [];
      await sb.process.getSessionCommandLogs(
        "s1",
        cmdId,
        (d) => out.push(d),
        (d) => err.push(d),
      );
      expect(out.join("")).toBe("one\nthree\n");
      expect(err.join("")).toBe("two\n");
      expect((await sb.process.getSessionCommand("s1", cmdId)).exitCode).toBe(4);
      expect(await sb.process.getSessionCommandLogs("s1", cmdId)).toMatchObject({
        stdout: "one\nthree\n",
        stderr: "two\n",
      });
      expect((await sb.process.listSessions()).map((s) => s.sessionId)).toEqual(["s1"]);

      // A background command goes on after its request; stop() ends it, the files stay.
      await sb.process.createSession("bg");
      await sb.process.executeSessionCommand("bg", {
        command: "echo started > /tmp/bg.txt; sleep 600",
        runAsync: true,
      });
      await expect
        .poll(async () => (await sb.process.executeCommand("cat /tmp/bg.txt")).result, { timeout: 5_000 })
        .toBe("started\n");
      expect((await sb.process.executeCommand("ps -eo args")).result).toContain("sleep 600");
      await sb.process.deleteSession("s1");
      expect((await sb.process.listSessions()).map((s) => s.sessionId)).toEqual(["bg"]);

      await sb.stop();
      expect(sb.state).toBe("stopped");
      await expect(sb.process.executeCommand("true")).rejects.toThrow(/not started/);
      await sb.start();
      expect(sb.state).toBe("started");
      expect((await sb.process.executeCommand("cat /tmp/bg.txt")).result).toBe("started\n");
      expect((await sb.process.executeCommand("ps -eo args")).result).not.toContain("sleep 600");
      expect(await sb.process.listSessions()).toEqual([]);
    } finally {
      await sb.delete();
    }
  });

  it("snapshots a sandbox into a new snapshot, and forks one; each keeps the files", async () => {
    const sb = await daytona.create({ snapshot: SNAPSHOT, user: "agent", labels: { run: "snap" } });
    const made: Sandbox[] = [];
    try {
      await sb.fs.uploadFile(Buffer.from("before"), "state.txt");
      await sb.createSnapshot("from-sandbox");
      expect(sb.state).toBe("started");
      expect(await daytona.snapshot.get("from-sandbox")).toMatchObject({
        state: "active",
        sourceSandboxId: sb.id,
      });
      const again = await daytona.create({ snapshot: "from-sandbox" });
      made.push(again);
      expect(again.user).toBe("agent");
      expect((await again.fs.downloadFile("state.txt")).toString()).toBe("before");

      const fork = await sb.fork();
      made.push(fork);
      expect(fork.id).not.toBe(sb.id);
      await fork.fs.uploadFile(Buffer.from("changed in the fork"), "state.txt");
      expect((await sb.fs.downloadFile("state.txt")).toString()).toBe("before");
      expect((await fork.fs.downloadFile("state.txt")).toString()).toBe("changed in the fork");
      expect((await fork.process.executeCommand("id -un")).result).toBe("agent\n");

      await sb.setLabels({ run: "snap", extra: "1" });
      await sb.setAutostopInterval(0);
      await sb.refreshActivity();
      await sb.refreshData();
      expect(sb.labels).toEqual({ run: "snap", extra: "1" });
      expect(sb.autoStopInterval).toBe(0);
      const listed: string[] = [];
      for await (const s of daytona.list({ labels: { run: "snap" }, limit: 1 })) listed.push(s.id);
      // Two pages of one: the fork carries its source's labels.
      expect(listed.sort()).toEqual([sb.id, fork.id].sort());
    } finally {
      for (const s of made) await s.delete();
      await sb.delete();
    }
    await daytona.snapshot.delete(await daytona.snapshot.get("from-sandbox"));
    await expect(daytona.snapshot.get("from-sandbox")).rejects.toBeInstanceOf(DaytonaNotFoundError);
  });

  it("cuts a networkBlockAll sandbox off the network; an open one reaches the bridge gateway", async () => {
    let hits = 0;
    const listener: Server = createServer((s) => {
      hits += 1;
      s.destroy();
    });
    await new Promise<void>((r) => listener.listen(0, double.gateway, r));
    const port = (listener.address() as { port: number }).port;
    const probe = `timeout 3 bash -c 'echo > /dev/tcp/${double.gateway}/${port}' && echo reached || echo blocked`;
    const open = await daytona.create({ snapshot: SNAPSHOT });
    const closed = await daytona.create({ snapshot: SNAPSHOT, networkBlockAll: true });
    try {
      expect(open.networkBlockAll).toBe(false);
      expect(closed.networkBlockAll).toBe(true);
      expect((await open.process.executeCommand(probe)).result).toContain("reached");
      expect(hits).toBe(1);
      expect((await closed.process.executeCommand(probe)).result).toContain("blocked");
      expect((await closed.process.executeCommand("cat /sys/class/net/*/operstate | wc -l")).result).toBe(
        "1\n",
      );
      expect(hits).toBe(1);
    } finally {
      await open.delete();
      await closed.delete();
      await new Promise<void>((r) => listener.close(() => r()));
    }
  });

  it("creates from a plain local image, answers 404 for what is not there and 401 for a wrong key", async () => {
    const sb = await daytona.create({ image: "debian:bookworm-slim" });
    try {
      expect(sb.user).toBe("root");
      expect((await sb.process.executeCommand("id -u")).result).toBe("0\n");
      expect(double.liveSandboxes()).toBe(1);
    } finally {
      await sb.delete();
    }
    expect(double.liveSandboxes()).toBe(0);
    expect(double.leftovers().filter((l) => l.startsWith("ps"))).toEqual([]);
    const gone = await daytona.get(sb.id).catch((e: unknown) => e);
    expect(gone).toBeInstanceOf(DaytonaNotFoundError);
    expect((gone as DaytonaNotFoundError).statusCode).toBe(404);
    expect((gone as Error).message).toBe(`Sandbox with ID or name ${sb.id} not found`);
    await expect(daytona.snapshot.get("no-such-snapshot")).rejects.toBeInstanceOf(DaytonaNotFoundError);

    const wrong = new Daytona({ ...double.config, apiKey: "dtn_wrong" });
    const refused = await wrong.get(sb.id).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(DaytonaAuthenticationError);
    expect((refused as DaytonaAuthenticationError).statusCode).toBe(401);
    await wrong[Symbol.asyncDispose]();
    expect(double.requests()).toContain("GET /api/object-storage/push-access");
  });

  it("takes a snapshot's image name as a local image, builds Image.base().runCommands, fails a missing image", async () => {
    const named = await daytona.snapshot.create({ name: "plain", image: "debian:bookworm-slim" });
    expect(named).toMatchObject({ state: "active", imageName: "debian:bookworm-slim" });
    const built = await daytona.snapshot.create({
      name: "run-commands",
      image: Image.base("debian:bookworm-slim").runCommands("echo built > /opt/marker"),
    });
    expect(built.state).toBe("active");
    const sb = await daytona.create({ snapshot: "run-commands" });
    try {
      expect((await sb.process.executeCommand("cat /opt/marker")).result).toBe("built\n");
    } finally {
      await sb.delete();
    }
    await expect(
      daytona.snapshot.create({ name: "missing", image: "denv-daytona-no-such-image:nope" }),
    ).rejects.toThrow(/not on the local engine/);
    for (const name of ["plain", "run-commands", "missing"]) await daytona.snapshot.delete(name);
    expect((await daytona.snapshot.list()).items.map((s) => s.name)).toEqual([SNAPSHOT]);
  });
});
