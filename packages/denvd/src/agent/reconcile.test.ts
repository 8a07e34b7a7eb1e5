import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Version } from "@denv/spec";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DockerHostRuntime } from "../runtime/docker-host-runtime.js";
import type { Runtime } from "../runtime/runtime.js";
import { openTestRuntime, writeProject } from "../testing/harness.js";
import { Journal, type JournalEntry } from "./journal.js";
import { silentLog } from "./log.js";
import { reconcile } from "./reconcile.js";
import { labelledWith } from "./testing/agent-harness.js";

/** Commands a crash left `started`, settled from the records and the labels. */

const COMPOSE = `
services:
  main:
    image: debian:bookworm-slim
    command: ["sleep", "infinity"]
    init: true
`;

describe("reconciling commands a crash interrupted", () => {
  let rt: Runtime & AsyncDisposable;
  let dir = "";
  let journal: Journal;
  const env = "rec/alpha";

  async function started(id: string, kind: JournalEntry["kind"], payload: Record<string, unknown>) {
    return journal.started(await journal.received({ id, kind, payload, deadline: Date.now() + 60_000 }));
  }
  async function settle(id: string) {
    await reconcile(new DockerHostRuntime(rt), journal, silentLog);
    return journal.get(id);
  }

  beforeAll(async () => {
    rt = await openTestRuntime();
    dir = await mkdtemp(join(tmpdir(), "denvd-reconcile-"));
    journal = await Journal.open(dir);
    const project = await writeProject({ "compose.yaml": COMPOSE });
    await rt.deploy({ project: "rec", projectDir: project, command: "cmd-deploy" });
    await rm(project, { recursive: true, force: true });
  });
  afterAll(async () => {
    await rt?.[Symbol.asyncDispose]();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("a deploy that finished before the crash is done with its environment", async () => {
    await started("cmd-deploy", "env.deploy", { project: "rec", environment: "alpha", source_stream: "s" });
    const entry = await settle("cmd-deploy");
    expect(entry).toMatchObject({
      state: "done",
      outcome: { ok: true, result: { id: env, status: "running" } },
    });
  });

  it("a fork whose services are not all up is removed and reported interrupted", async () => {
    await rt.snapshot(env, { command: "cmd-v1" });
    const fork = await rt.fork("rec@v1", { name: "f1", command: "cmd-fork" });
    await rt.host.docker.containers.stop(fork.services[0]?.container_id ?? "", 1);
    await started("cmd-fork", "env.fork", { version: "rec@v1", name: "f1" });
    const entry = await settle("cmd-fork");
    expect(entry?.outcome).toEqual({
      ok: false,
      error: {
        code: "interrupted",
        message: "denvd restarted during the command; what it created was removed",
      },
    });
    expect(await rt.host.records.getEnvironment("rec/f1")).toBeUndefined();
    expect(await labelledWith(rt.host.docker, rt.host.hostId, "cmd-fork")).toEqual({
      containers: 0,
      networks: 0,
      volumes: 0,
    });
  });

  it("a snapshot that recorded its version is done with it", async () => {
    await started("cmd-v1", "env.snapshot", { environment: env });
    const entry = await settle("cmd-v1");
    const outcome = entry?.outcome;
    if (!outcome?.ok) throw new Error(`not reconciled as done: ${JSON.stringify(outcome)}`);
    expect(Version.parse(outcome.result).id).toBe("rec@v1");
  });

  it("a snapshot caught frozen thaws the environment and is reported interrupted", async () => {
    const id = (await rt.environment(env)).services[0]?.container_id ?? "";
    await rt.host.docker.containers.pause(id);
    await started("cmd-v2", "env.snapshot", { environment: env });
    const entry = await settle("cmd-v2");
    expect(entry?.outcome).toMatchObject({ ok: false, error: { code: "interrupted" } });
    expect((await rt.host.docker.containers.inspect(id))?.paused).toBe(false);
  });

  it("an exec is reported interrupted, never run again", async () => {
    await started("cmd-exec", "env.exec", { environment: env, exec: { shell: "true" } });
    const entry = await settle("cmd-exec");
    expect(entry?.outcome).toEqual({
      ok: false,
      error: {
        code: "interrupted",
        message: "denvd restarted during the command; send it again under a new id to retry",
      },
    });
    expect(await journal.unfinished()).toEqual([]);
  });
});
