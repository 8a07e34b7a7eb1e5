import { HostRefusals } from "@denv/spec";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Runtime } from "./runtime/runtime.js";
import { leftovers, openTestRuntime, writeProject } from "./testing/harness.js";

const COMPOSE = `
services:
  main:
    image: debian:bookworm-slim
    command: ["sleep", "infinity"]
    init: true
    volumes: [data:/data]
  side:
    image: debian:bookworm-slim
    command: ["sleep", "infinity"]
    init: true
    volumes: [sidedata:/sidedata]
volumes:
  data: {}
  sidedata: {}
x-denv:
  agent: main
`;

describe("snapshot and fork", () => {
  let rt: Runtime & AsyncDisposable;
  const env = "snap/alpha";

  beforeAll(async () => {
    rt = await openTestRuntime({ squashThreshold: 6 });
    await rt.deploy({ project: "snap", projectDir: await writeProject({ "compose.yaml": COMPOSE }) });
  });
  afterAll(async () => rt[Symbol.asyncDispose]());

  it("uses copy-on-write volume snapshots and records the version", async () => {
    await rt.exec(env, { shell: "echo layer-v1 > /workspace/layer.txt" });
    await rt.exec(env, { service: "side", user: "0", shell: "echo vol-v1 > /sidedata/v.txt" });
    const v = await rt.snapshot(env);
    expect(v.id).toBe("snap@v1");
    expect(v.method).toBe("btrfs");
    expect(Object.keys(v.images).sort()).toEqual(["main", "side"]);
    expect(Object.keys(v.volumes).sort()).toEqual(["data", "sidedata"]);
    expect(v.timings.frozenMs).toBeGreaterThanOrEqual(0);
    expect(v.timings.totalMs).toBeGreaterThanOrEqual(v.timings.frozenMs);
    // Thawed again.
    const r = await rt.exec(env, { cmd: ["true"] });
    expect(r.exitCode).toBe(0);
  });

  it("forks see the data at snapshot time and their writes do not reach the parent", async () => {
    await rt.exec(env, { shell: "echo layer-v2 > /workspace/layer.txt" });
    await rt.exec(env, { service: "side", user: "0", shell: "echo vol-v2 > /sidedata/v.txt" });
    const fork = await rt.fork("snap@v1", { name: "f1" });
    expect(fork.parent_version).toBe("snap@v1");
    const layer = await rt.exec(fork.id, { cmd: ["cat", "/workspace/layer.txt"] });
    expect(layer.stdout.toString()).toBe("layer-v1\n");
    const vol = await rt.exec(fork.id, { service: "side", cmd: ["cat", "/sidedata/v.txt"] });
    expect(vol.stdout.toString()).toBe("vol-v1\n");
    // The fork's services started fresh: the main process is a new one.
    await rt.exec(fork.id, { shell: "echo fork-write > /workspace/layer.txt" });
    await rt.exec(fork.id, { service: "side", user: "0", shell: "echo fork-vol > /sidedata/v.txt" });
    expect((await rt.exec(env, { cmd: ["cat", "/workspace/layer.txt"] })).stdout.toString()).toBe(
      "layer-v2\n",
    );
    expect((await rt.exec(env, { service: "side", cmd: ["cat", "/sidedata/v.txt"] })).stdout.toString()).toBe(
      "vol-v2\n",
    );
    // The fork runs under the protections too.
    const probe = await rt.probeEgress(fork.id);
    expect(probe.ok).toBe(true);
    expect((await rt.exec(fork.id, { cmd: ["id", "-u"] })).stdout.toString()).toBe("1000\n");
  });

  it("forks a fork", async () => {
    const v2 = await rt.snapshot("snap/f1");
    expect(v2.parentVersion).toBe("snap@v1");
    const f2 = await rt.fork(v2.id, { name: "f2" });
    expect((await rt.exec(f2.id, { cmd: ["cat", "/workspace/layer.txt"] })).stdout.toString()).toBe(
      "fork-write\n",
    );
    expect(
      (await rt.exec(f2.id, { service: "side", cmd: ["cat", "/sidedata/v.txt"] })).stdout.toString(),
    ).toBe("fork-vol\n");
    // A name the host holds is refused, before anything is created, in spec's words.
    await expect(rt.fork(v2.id, { name: "f2" })).rejects.toThrow(HostRefusals.forkExists("snap/f2"));
    await expect(
      rt.deploy({ project: "snap", projectDir: await writeProject({ "compose.yaml": COMPOSE }) }),
    ).rejects.toThrow(HostRefusals.environmentExists("snap/alpha"));
    await rt.destroy(f2.id);
  });

  it("squashes a commit chain past the threshold and still forks", async () => {
    let current = "snap/f1";
    let last = "";
    let squashed = false;
    for (let i = 0; i < 5; i++) {
      await rt.exec(current, { shell: `echo gen-${i} > /workspace/gen.txt` });
      const v = await rt.snapshot(current);
      last = v.id;
      squashed ||= Object.values(v.images).some((img) => img.squashed === true);
      for (const img of Object.values(v.images)) expect(img.layers).toBeLessThanOrEqual(6);
      const next = await rt.fork(v.id, { name: `chain-${i}` });
      if (current !== "snap/f1") await rt.destroy(current);
      current = next.id;
    }
    expect(squashed).toBe(true);
    expect((await rt.exec(current, { cmd: ["cat", "/workspace/gen.txt"] })).stdout.toString()).toBe(
      "gen-4\n",
    );
    expect((await rt.exec(current, { cmd: ["cat", "/workspace/layer.txt"] })).stdout.toString()).toBe(
      "fork-write\n",
    );
    // The squashed image keeps the service's config: it runs as before.
    expect((await rt.exec(current, { cmd: ["id", "-u"] })).stdout.toString()).toBe("1000\n");
    expect(last).toMatch(/^snap@v\d+$/);
    await rt.destroy(current);
  });

  it("refuses to delete a version that environments were forked from", async () => {
    await expect(rt.deleteVersion("snap@v1")).rejects.toThrow(/is the parent of snap\/f1/);
  });

  it("takes the default route away again when Docker restarts a service", async () => {
    const fork = await rt.fork("snap@v1", { name: "restarted" });
    const main = fork.services.find((s) => s.name === "main")?.container_id as string;
    await rt.host.docker.containers.restart(main, 0);
    // The engine's start event reaches the runtime asynchronously.
    let probe = await rt.probeEgress(fork.id);
    for (let i = 0; i < 50 && !probe.ok; i++) {
      await new Promise((r) => setTimeout(r, 100));
      probe = await rt.probeEgress(fork.id);
    }
    expect(probe.findings).toEqual([]);
    await rt.destroy(fork.id);
  });

  it("destroy leaves no container, network or volume behind", async () => {
    for (const e of (await rt.list()).environments) await rt.destroy(e.id);
    expect(await leftovers(rt)).toBe(0);
    expect(await rt.host.store.liveIds()).toEqual([]);
  });

  it("collects orphans at start: nothing labelled with the host survives a restart", async () => {
    const fork = await rt.fork("snap@v1", { name: "orphan" });
    // Simulate a crash that lost the record but not the Docker objects.
    await rt.host.records.deleteEnvironment(fork.id);
    expect(await leftovers(rt)).toBeGreaterThan(0);
    // A restarted denvd (same host id and state) reconciles at start.
    const restarted = await Runtime.open(rt.options);
    try {
      expect(await leftovers(restarted)).toBe(0);
      expect(await restarted.host.store.liveIds()).toEqual([]);
      expect((await restarted.list()).versions.map((v) => v.id)).toContain("snap@v1");
    } finally {
      await restarted.close();
    }
  });
});
