import { type DeploymentKind, Phases, PROTOCOL_VERSION, ProgressFrame } from "@denv/spec";
import { describe, expect, it } from "vitest";
import { HostError, type HostHub, type SendOptions } from "../hub/hub.js";
import type { DeploymentRecord } from "../store/records.js";
import type { Store } from "../store/store.js";
import { hostEnvironment, hostVersion } from "../testing/fake-results.js";
import { quiet } from "../testing/harness.js";
import { DeploymentEvents } from "./events.js";
import type { Placer } from "./placement.js";
import { RunContext } from "./run-context.js";

/**
 * RunContext against a scripted hub: what the host sends while a command runs is the only way
 * its evidence reaches a phase (the frames are parsed as the hub parses them).
 */

type Frames = Array<Record<string, unknown>>;

/** A hub whose every send plays `attempts[n]`: progress frames, then the result (or an error). */
function scriptedHub(attempts: Array<{ frames: Frames; result?: unknown; error?: Error }>): HostHub {
  let n = 0;
  const send = async (_host: string, _kind: string, _payload: unknown, opts: SendOptions) => {
    const attempt = attempts[n++];
    if (!attempt) throw new Error("no more scripted attempts");
    for (const f of attempt.frames) {
      opts.onProgress?.(ProgressFrame.parse({ v: PROTOCOL_VERSION, type: "progress", id: opts.id, ...f }));
    }
    if (attempt.error) throw attempt.error;
    return attempt.result;
  };
  return { send } as unknown as HostHub;
}

function runOf(kind: DeploymentKind, hub: HostHub): RunContext {
  const store = { updateDeployment: async () => {}, appendLog: async () => {} } as unknown as Store;
  const d: DeploymentRecord = {
    id: "dep_test",
    kind,
    project: "shop",
    environment: "shop/alpha",
    status: "running",
    phases: Phases[kind].map((name) => ({ name, status: "pending" as const })),
    state: { request: {}, steps: {} },
    createdAt: new Date().toISOString(),
  };
  const deps = {
    store,
    hub,
    placer: {} as Placer,
    events: new DeploymentEvents(),
    log: quiet,
    commandTimeoutMs: 10_000,
    resumeTimeoutMs: 10_000,
    afterVersion: async () => {},
  };
  return new RunContext(deps, d, false, 0);
}

describe("RunContext: one path for host evidence", () => {
  it("a phase's evidence is what the host sent when the phase ended, never the result's", async () => {
    const env = hostEnvironment("shop/alpha-abc123", "running");
    const hub = scriptedHub([
      {
        frames: [
          { phase: "validate" },
          { ended: "validate", evidence: { services: ["api", "redis"], agent: "api" } },
          { phase: "build" },
          { line: "building api" },
          { ended: "build", evidence: { digests: { api: "sha256:1", redis: "sha256:2" } } },
          // The runtime's own place: not one of the deployment's phases that run on the host.
          { phase: "place" },
          { ended: "place", evidence: { host: "h1" } },
          { phase: "start" },
          { ended: "start", evidence: { containers: { api: "c1", redis: "c2" } }, phase: "health" },
        ],
        result: env,
      },
    ]);
    const ctx = runOf("deploy", hub);
    const result = await ctx.command(
      "deploy",
      "h1",
      "env.deploy",
      () => ({ project: "shop", environment: "a", source_stream: "s" }),
      {
        phases: ["validate", "build", "start", "health", "probe"],
      },
    );
    expect(result.evidence.probe).toMatchObject({ ok: true });
    expect(ctx.phaseOf("validate")).toMatchObject({
      status: "succeeded",
      evidence: { services: ["api", "redis"], agent: "api" },
    });
    expect(ctx.phaseOf("build")?.evidence).toEqual({ digests: { api: "sha256:1", redis: "sha256:2" } });
    expect(ctx.phaseOf("start")?.evidence).toEqual({ containers: { api: "c1", redis: "c2" } });
    // Not ended by the host: they end with the result, and take nothing from it.
    for (const name of ["health", "probe"] as const) {
      expect(ctx.phaseOf(name)?.status, name).toBe("succeeded");
      expect(ctx.phaseOf(name)?.evidence, name).toBeUndefined();
    }
    // The cp's own place is left to the cp.
    expect(ctx.phaseOf("place")).toEqual({ name: "place", status: "pending" });
  });

  it("a command run inside one phase: the evidence of the host's own phases joins it", async () => {
    const v = hostVersion("shop", 3, "shop/alpha-abc123");
    const record = { version: v.id, method: v.method, sizes: v.sizes, timings: v.timings };
    const hub = scriptedHub([
      {
        frames: [
          { phase: "freeze" },
          { ended: "freeze", evidence: { paused: ["api", "redis"] } },
          { phase: "thaw" },
          { ended: "thaw", evidence: { frozen_ms: 41 }, phase: "record" },
          { ended: "record", evidence: record },
        ],
        result: v,
      },
    ]);
    const ctx = runOf("deploy", hub);
    await ctx.command(
      "snapshot",
      "h1",
      "env.snapshot",
      { environment: "shop/alpha-abc123" },
      {
        phases: [],
        within: "snapshot",
      },
    );
    expect(ctx.phaseOf("snapshot")).toMatchObject({
      status: "succeeded",
      evidence: { paused: ["api", "redis"], frozen_ms: 41, ...record },
    });
  });

  it("a phase ended again by an attempt sent after an interruption keeps the newer evidence", async () => {
    const hub = scriptedHub([
      {
        frames: [{ phase: "stop" }, { ended: "stop", evidence: { stopped: ["redis"] } }],
        error: new HostError("interrupted", "denvd restarted during the command"),
      },
      {
        frames: [{ phase: "stop" }, { ended: "stop", evidence: { stopped: ["redis", "api"] } }],
        result: hostEnvironment("shop/alpha-abc123", "stopped"),
      },
    ]);
    const ctx = runOf("stop", hub);
    await ctx.command(
      "stop",
      "h1",
      "env.stop",
      { environment: "shop/alpha-abc123" },
      { phases: Phases.stop },
    );
    expect(ctx.phaseOf("stop")).toMatchObject({
      status: "succeeded",
      evidence: { stopped: ["redis", "api"] },
    });
  });

  it("a phase the host did not end fails with the host's error", async () => {
    const hub = scriptedHub([
      {
        frames: [{ phase: "validate" }],
        error: new HostError("invalid_compose", "service 'api': 'privileged' is refused"),
      },
    ]);
    const ctx = runOf("deploy", hub);
    await expect(
      ctx.command(
        "deploy",
        "h1",
        "env.deploy",
        () => ({ project: "shop", environment: "a", source_stream: "s" }),
        {
          phases: ["validate", "build"],
        },
      ),
    ).rejects.toThrow("privileged");
    expect(ctx.phaseOf("validate")).toMatchObject({
      status: "failed",
      evidence: { error: "service 'api': 'privileged' is refused" },
    });
    expect(ctx.phaseOf("build")?.status).toBe("pending");
  });
});
