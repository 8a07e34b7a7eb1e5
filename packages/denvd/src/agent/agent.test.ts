import { randomBytes } from "node:crypto";
import { join } from "node:path";
import { type HelloFrame, INITIAL_WINDOW, PROTOCOL_VERSION, type ProgressFrame, Version } from "@denv/spec";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Journal } from "./journal.js";
import { labelledWith, projectTar, startTestHost, type TestHost } from "./testing/agent-harness.js";

/** A small stack that needs no build: the agent service and a side service, both asleep. */
const COMPOSE = `
services:
  main:
    image: debian:bookworm-slim
    command: ["sleep", "infinity"]
    init: true
    volumes: ["data:/data"]
  side:
    image: debian:bookworm-slim
    command: ["sleep", "infinity"]
    init: true
volumes:
  data: {}
x-denv:
  agent: main
`;

describe("denvd's agent against a control plane", () => {
  let host: TestHost;
  const env = "stack/alpha";
  let deployId = "";

  beforeAll(async () => {
    // Short heartbeats, but not so short that a loaded machine's event-loop lag passes for a
    // silent control plane (3 missed): a redial drops the progress frames sent meanwhile, and the
    // result of a command that finished meanwhile (this fake control plane sends no command
    // again). At 500 ms a loaded CI machine (load 8 on 2 cores) redialled within a deploy.
    host = await startTestHost({ heartbeatMs: 1_000 });
  });
  afterAll(async () => {
    await host?.[Symbol.asyncDispose]();
  });

  it("says hello first: host id, version, capacity, labels, what it holds", () => {
    const hello = host.cp.frames[0] as HelloFrame;
    expect(hello.type).toBe("hello");
    expect(hello.v).toBe(PROTOCOL_VERSION);
    expect(hello.host_id).toBe(host.rt.host.hostId);
    expect(hello.version).toMatch(/^\d+\.\d+\.\d+/);
    expect(hello.capacity.cpus).toBeGreaterThan(0);
    expect(hello.capacity.memory_bytes).toBeGreaterThan(1024 ** 2);
    expect(hello.capacity.disk_free_bytes).toBeGreaterThan(0);
    expect(hello.labels).toEqual({ zone: "test", disk: "ssd" });
    expect(hello).toMatchObject({ environments: [], versions: [], unfinished: [] });
  });

  it("sends heartbeats on its interval", async () => {
    const from = host.cp.frames.length;
    await host.cp.waitFor((f) => f.type === "heartbeat", 5_000, from);
    const n = host.cp.of("heartbeat").length;
    await new Promise((r) => setTimeout(r, 3_200));
    expect(host.cp.of("heartbeat").length).toBeGreaterThanOrEqual(n + 2);
  });

  it("deploys from a gzipped source stream, reporting its phases", async () => {
    deployId = host.cp.command("env.deploy", {
      project: "stack",
      environment: "alpha",
      source_stream: "src-1",
    });
    await host.cp.write(
      "src-1",
      await projectTar({ "compose.yaml": COMPOSE, README: "docs\n" }, true),
      "file",
    );
    const result = await host.cp.result(deployId);
    expect(result.error).toBeUndefined();
    expect(result.ok).toBe(true);
    const info = result.result as Record<string, unknown> & { services: Array<Record<string, string>> };
    expect(info).toMatchObject({ id: env, project: "stack", name: "alpha", status: "running" });
    expect(info.services.map((s) => s.name)).toEqual(["main", "side"]);
    expect(info.services[0]?.container_id).toMatch(/^[0-9a-f]{64}$/);
    expect(info.services[0]?.image_id).toMatch(/^sha256:/);
    // ack before any progress, phases in the spec's order, result last.
    const mine = host.cp.frames.filter((f) => "id" in f && f.id === deployId);
    expect(mine[0]?.type).toBe("ack");
    expect(mine.at(-1)?.type).toBe("result");
    const phases = mine.filter((f): f is ProgressFrame => f.type === "progress" && f.phase !== undefined);
    expect(phases.map((p) => p.phase)).toEqual([
      "resolve source",
      "validate",
      "build",
      "place",
      "start",
      "health",
      "probe",
    ]);
    const source = mine.find((f) => f.type === "progress" && f.evidence?.source) as ProgressFrame;
    expect(source.evidence?.source).toMatchObject({ compressed: true, entries: 2 });
    // Each phase ends with its evidence, the only evidence the control plane takes for it.
    const ends = Object.fromEntries(
      mine.flatMap((f) => (f.type === "progress" && f.ended ? [[f.ended, f.evidence]] : [])),
    );
    expect(Object.keys(ends)).toEqual(phases.map((p) => p.phase));
    expect(ends.validate).toEqual({ services: ["main", "side"], agent: "main" });
    expect(Object.keys(ends.start?.containers ?? {})).toEqual(["main", "side"]);
    expect(ends.probe).toMatchObject({ ok: true, findings: [] });
    // What it created carries its id: one network, two containers, one volume.
    expect(await labelledWith(host.rt.host.docker, host.rt.host.hostId, deployId)).toEqual({
      containers: 2,
      networks: 1,
      volumes: 1,
    });
  });

  it("answers a re-sent command id from the journal without running it again", async () => {
    const first = host.cp.of("result", deployId)[0];
    const from = host.cp.frames.length;
    host.cp.command(
      "env.deploy",
      { project: "stack", environment: "alpha", source_stream: "src-2" },
      { id: deployId },
    );
    const again = await host.cp.result(deployId, 30_000, from);
    expect(again).toEqual(first);
    expect(await labelledWith(host.rt.host.docker, host.rt.host.hostId, deployId)).toEqual({
      containers: 2,
      networks: 1,
      volumes: 1,
    });
    expect(host.logs.filter((l) => l.startsWith("command answered from memory"))).toHaveLength(1);
    expect(host.cp.of("progress", deployId).filter((p) => p.phase === "start")).toHaveLength(1);
  });

  it("runs exec and returns text, or base64 when the output is not UTF-8", async () => {
    const text = await host.cp.result(
      host.cp.command("env.exec", { environment: env, exec: { shell: "id -u; echo err >&2; exit 3" } }),
    );
    expect(text.result).toMatchObject({ exit_code: 3, stdout: "1000\n", stderr: "err\n", encoding: "utf8" });
    const stdin = Buffer.from([0xff, 0xfe, 0x00, 0x41]);
    const bin = await host.cp.result(
      host.cp.command("env.exec", {
        environment: env,
        exec: { cmd: ["cat"], stdin: stdin.toString("base64") },
      }),
    );
    expect(bin.result).toMatchObject({ exit_code: 0, encoding: "base64", stdout: stdin.toString("base64") });
  });

  it("keeps an exec's output in memory for a re-send, and out of the journal on disk", async () => {
    const id = host.cp.command("env.exec", { environment: env, exec: { shell: "echo agent-output" } });
    const first = await host.cp.result(id);
    expect(first.result).toMatchObject({ stdout: "agent-output\n" });
    const from = host.cp.frames.length;
    host.cp.command("env.exec", { environment: env, exec: { shell: "echo agent-output" } }, { id });
    expect(await host.cp.result(id, 10_000, from)).toEqual(first);
    const journal = await Journal.open(join(host.rt.host.stateDir, "journal"));
    const entry = await journal.get(id);
    expect(entry?.outcome).toMatchObject({
      ok: true,
      result: { exit_code: 0, stdout: "", output_kept: false },
    });
    expect(entry?.payload).toBeUndefined();
  });

  it("journals nothing of a command that changes nothing (a probe), and answers its re-send from memory", async () => {
    const id = host.cp.command("env.probe_egress", { environment: env });
    const first = await host.cp.result(id);
    expect(first.result).toMatchObject({ ok: true });
    const journal = await Journal.open(join(host.rt.host.stateDir, "journal"));
    expect(await journal.get(id)).toBeUndefined();
    const from = host.cp.frames.length;
    host.cp.command("env.probe_egress", { environment: env }, { id });
    expect(await host.cp.result(id, 10_000, from)).toEqual(first);
    // An exec changes the environment: it is journalled (the test above reads its entry).
    const exec = await host.cp.result(
      host.cp.command("env.exec", { environment: env, exec: { shell: "true" } }),
    );
    expect(await journal.get(exec.id)).toMatchObject({ state: "done" });
  });

  it("refuses a payload that does not match its kind, and a command past its deadline", async () => {
    const bad = await host.cp.result(host.cp.command("env.exec", { environment: env, exec: { cmd: [] } }));
    expect(bad.ok).toBe(false);
    expect(bad.error?.code).toBe("invalid_request");
    expect(bad.error?.message).toMatch(/^invalid env\.exec payload: exec\.cmd/);
    const late = await host.cp.result(host.cp.command("host.gc", {}, { deadlineMs: -1 }));
    expect(late.error?.code).toBe("timeout");
  });

  it("snapshots under the control plane's number, forks, restores, and answers with spec shapes", async () => {
    await host.cp.result(
      host.cp.command("env.exec", { environment: env, exec: { shell: "echo one > /workspace/f" } }),
    );
    const snap = await host.cp.result(host.cp.command("env.snapshot", { environment: env, number: 7 }));
    expect(snap.error).toBeUndefined();
    const version = Version.parse(snap.result);
    expect(version).toMatchObject({
      id: "stack@v7",
      number: 7,
      host_id: host.rt.host.hostId,
      source_environment: env,
    });
    expect(Object.keys(version.digests).sort()).toEqual(["main", "side"]);
    expect(version.timings.frozen_ms).toBeGreaterThanOrEqual(0);
    const snapPhases = host.cp.of("progress", (snap as { id: string }).id).flatMap((p) => p.phase ?? []);
    expect(snapPhases).toEqual(["freeze", "capture layers", "capture volumes", "thaw", "record"]);
    const snapEnds = host.cp
      .of("progress", (snap as { id: string }).id)
      .flatMap((p) => (p.ended ? [[p.ended, p.evidence] as const] : []));
    expect(snapEnds.map(([p]) => p)).toEqual(snapPhases);
    expect(Object.fromEntries(snapEnds)).toMatchObject({
      freeze: { paused: ["main", "side"] },
      record: { version: "stack@v7", method: version.method, timings: version.timings },
    });

    const fork = await host.cp.result(host.cp.command("env.fork", { version: "stack@v7", name: "f1" }));
    expect(fork.result).toMatchObject({ id: "stack/f1", parent_version: "stack@v7", status: "running" });

    await host.cp.result(
      host.cp.command("env.exec", { environment: env, exec: { shell: "echo two > /workspace/f" } }),
    );
    const restored = await host.cp.result(
      host.cp.command("env.restore", { environment: env, version: "stack@v7" }),
    );
    expect(restored.error).toBeUndefined();
    expect(restored.result).toMatchObject({ id: env, parent_version: "stack@v7" });
    const read = await host.cp.result(
      host.cp.command("env.exec", { environment: env, exec: { shell: "cat /workspace/f" } }),
    );
    expect(read.result).toMatchObject({ stdout: "one\n" });

    const wrong = await host.cp.result(
      host.cp.command("env.restore", { environment: "other/alpha", version: "stack@v7" }),
    );
    expect(wrong.error?.message).toBe("version stack@v7 belongs to project stack, not to other");
  });

  it("stops, starts, probes, shows logs, deletes versions, destroys and collects", async () => {
    const stopped = await host.cp.result(host.cp.command("env.stop", { environment: "stack/f1" }));
    expect(stopped.result).toMatchObject({ status: "stopped" });
    const started = await host.cp.result(host.cp.command("env.start", { environment: "stack/f1" }));
    expect(started.result).toMatchObject({ status: "running" });
    const probe = await host.cp.result(host.cp.command("env.probe_egress", { environment: "stack/f1" }));
    expect(probe.result).toMatchObject({ ok: true, network: { internal: true, reject_rule: true } });
    const logs = await host.cp.result(host.cp.command("env.logs", { environment: "stack/f1", tail: 5 }));
    expect(logs.result).toEqual({ stdout: "", stderr: "" });
    const verify = await host.cp.result(host.cp.command("env.verify", { environment: "stack/f1" }));
    expect(verify.error?.code).toBe("invalid_request");

    const inUse = await host.cp.result(host.cp.command("version.delete", { version: "stack@v7" }));
    expect(inUse.error?.code).toBe("conflict");
    for (const e of ["stack/f1", env]) {
      const d = await host.cp.result(host.cp.command("env.destroy", { environment: e }));
      expect(d.result).toEqual({ environment: e, destroyed: true });
    }
    const del = await host.cp.result(host.cp.command("version.delete", { version: "stack@v7" }));
    expect(del.result).toEqual({ version: "stack@v7", deleted: true });
    const gc = await host.cp.result(host.cp.command("host.gc", {}));
    expect(gc.result).toEqual({ removed: [] });
    expect(await labelledWith(host.rt.host.docker, host.rt.host.hostId, deployId)).toEqual({
      containers: 0,
      networks: 0,
      volumes: 0,
    });
  });

  it("dials again after the socket drops and says hello again with what it holds", async () => {
    const id = host.cp.command("env.exec", {
      environment: "nope/alpha",
      exec: { shell: "true" },
    });
    await host.cp.result(id);
    const n = host.cp.connections;
    host.cp.dropConnection();
    await host.cp.waitConnections(n + 1, 10_000);
    const from = host.cp.frames.length;
    const hello = await host.cp.waitFor<HelloFrame>((f) => f.type === "hello", 10_000, from - 1);
    expect(hello.host_id).toBe(host.rt.host.hostId);
    // Re-sent after the reconnect: answered from the journal.
    const before = host.cp.frames.length;
    host.cp.command("env.exec", { environment: "nope/alpha", exec: { shell: "true" } }, { id });
    const again = await host.cp.result(id, 10_000, before);
    expect(again.error?.code).toBe("not_found");
  });

  it("refuses a stream writer that oversteps its window", async () => {
    const stream = `s-${randomBytes(3).toString("hex")}`;
    const id = host.cp.command("env.files.put", { environment: "nope/alpha", path: "/tmp", stream });
    const big = Buffer.alloc(INITIAL_WINDOW + 1).toString("base64");
    host.cp.send({ v: PROTOCOL_VERSION, type: "data", stream, seq: 0, channel: "file", data: big });
    const r = await host.cp.result(id);
    expect(r.ok).toBe(false);
  });
});
