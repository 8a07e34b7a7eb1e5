import { execFileSync } from "node:child_process";
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
});
