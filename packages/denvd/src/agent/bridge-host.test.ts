import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type CommandKind, type HostEnvironment, HostRefusals } from "@denv/spec";
import { DenvError } from "@denv/spec/errors";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { HostRuntime } from "../runtime/host-runtime.js";
import { type Daemon, startDaemon } from "./daemon.js";
import { Journal } from "./journal.js";
import { silentLog } from "./log.js";
import { FakeCp } from "./testing/fake-cp.js";

/**
 * denvd's agent over a runtime that is not denv's Docker runtime (a bridge to a hosted provider
 * has none): it says hello from what the runtime holds, sends the runtime's answers, reconciles a
 * crash through the runtime's settle, and refuses what needs this machine's engine (a port
 * tunnel, a version transfer) in one line, with nothing of Docker touched.
 */
const ENV: HostEnvironment = {
  id: "p/alpha",
  project: "p",
  name: "alpha",
  status: "running",
  agent: { service: "main", user: "1000", workdir: "/work" },
  services: [{ name: "main", container_id: "sbx-1", image: "tpl", image_id: "tpl-1" }],
  network: { id: "", name: "", subnet: "", gateway: "" },
  evidence: {},
} as unknown as HostEnvironment;

/** A runtime holding one environment; every verb it does not need here says so. */
function bridgeRuntime(hostId: string, stateDir: string, settled: string[]): HostRuntime {
  const unused = (verb: string) => () =>
    Promise.reject(new DenvError("internal", `${verb}: not in this test`));
  return {
    hostId,
    stateDir,
    deploy: unused("deploy"),
    fork: unused("fork"),
    snapshot: unused("snapshot"),
    verify: unused("verify"),
    exec: unused("exec"),
    putFiles: unused("putFiles"),
    getFiles: unused("getFiles"),
    stop: unused("stop"),
    start: unused("start"),
    destroy: unused("destroy"),
    deleteVersion: unused("deleteVersion"),
    probeEgress: unused("probeEgress"),
    logs: unused("logs"),
    list: async () => ({ environments: [ENV], versions: [] }),
    has: async (id) => id === ENV.id,
    version: unused("version"),
    gc: async () => ({ removed: [] }),
    settle: async (c: { id: string; kind: CommandKind }) => {
      settled.push(`${c.kind} ${c.id}`);
      return { done: false, rolledBack: false };
    },
    close: async () => undefined,
  };
}

describe("denvd's agent on a runtime without a Docker engine", () => {
  let cp: FakeCp;
  let daemon: Daemon;
  let stateDir = "";
  const hostId = "host-bridge1";
  const settled: string[] = [];

  beforeAll(async () => {
    stateDir = await mkdtemp(join(tmpdir(), "denvd-bridge-"));
    // A command the last run of this host started and never finished.
    const journal = await Journal.open(join(stateDir, "journal"));
    const payload = { environment: "p/alpha", exec: { cmd: ["true"] } };
    await journal.started(
      await journal.received({ id: "cmd-crashed", kind: "env.exec", payload, deadline: Date.now() + 60_000 }),
    );
    cp = await FakeCp.start({ hostId });
    daemon = await startDaemon({
      runtime: bridgeRuntime(hostId, stateDir, settled),
      host: { url: cp.url, credential: cp.credential },
      labels: {},
      log: silentLog,
      backoff: { initialMs: 50, maxMs: 500 },
    });
  });
  afterAll(async () => {
    await daemon?.stop(1_000);
    await cp?.close();
    await rm(stateDir, { recursive: true, force: true });
  });

  it("settles the crashed command through the runtime, then says hello with what it holds", async () => {
    const hello = await cp.waitFor((f) => f.type === "hello");
    expect(hello).toMatchObject({ host_id: hostId, environments: [{ id: "p/alpha", status: "running" }] });
    expect(settled).toEqual(["env.exec cmd-crashed"]);
    // Sent again under its id, the command is not run again: its recorded outcome comes back.
    const again = await cp.result(
      cp.command("env.exec", { environment: "p/alpha", exec: { cmd: ["true"] } }, { id: "cmd-crashed" }),
    );
    expect(again).toMatchObject({ ok: false, error: { code: "interrupted" } });
  });

  it("refuses a port tunnel and a version transfer in one line", async () => {
    const tunnel = await cp.result(
      cp.command("env.connect", { environment: "p/alpha", service: "main", port: 80, stream: "s-t" }),
    );
    expect(tunnel).toMatchObject({
      ok: false,
      error: { code: "conflict", message: HostRefusals.needsEngine("a port tunnel", hostId) },
    });
    const send = await cp.result(cp.command("version.send", { version: "p@v1", stream: "s-v", resume: {} }));
    expect(send).toMatchObject({
      ok: false,
      error: { code: "conflict", message: HostRefusals.needsEngine("version transfer", hostId) },
    });
  });
});
