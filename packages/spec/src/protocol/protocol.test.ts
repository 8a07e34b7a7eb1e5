import { describe, expect, it } from "vitest";
import { z } from "zod";
import { PhaseName } from "../phases.js";
import { CommandKind, CommandPayloads, HostPhases } from "./commands.js";
import { EnvironmentEvidence, HostPhaseName, PhaseEvidence, VerifyEvidence } from "./evidence.js";
import { parseFrame } from "./frames.js";
import { CommandResults, HostEnvironment } from "./results.js";

/** Every key a schema names, nested, as a path (the keys of records are data, not names). */
function keysOf(schema: z.core.$ZodType, at: string): string[] {
  const def = schema._zod.def;
  switch (def.type) {
    case "object":
      return Object.entries((def as z.core.$ZodObjectDef).shape).flatMap(([k, v]) => [
        `${at}.${k}`,
        ...keysOf(v, `${at}.${k}`),
      ]);
    case "array":
      return keysOf((def as z.core.$ZodArrayDef).element, `${at}[]`);
    case "union":
      return (def as z.core.$ZodUnionDef).options.flatMap((o) => keysOf(o, at));
    case "record":
      return keysOf((def as z.core.$ZodRecordDef).valueType, `${at}{}`);
    case "optional":
    case "nullable":
    case "default":
    case "readonly":
      return keysOf((def as z.core.$ZodOptionalDef).innerType, at);
    default:
      return [];
  }
}

const lastKey = (path: string) => path.slice(path.lastIndexOf(".") + 1);
const progress = (f: Record<string, unknown>) => () =>
  parseFrame(JSON.stringify({ v: 1, type: "progress", id: "cmd-1", ...f }));

describe("the protocol's contract", () => {
  it("every command kind has a payload schema and a result schema", () => {
    for (const kind of CommandKind.options) {
      expect(CommandPayloads[kind], kind).toBeInstanceOf(z.ZodType);
      expect(CommandResults[kind], kind).toBeInstanceOf(z.ZodType);
    }
  });

  it("every phase a host reports has an evidence schema; transfer, smoke verify and switch are the control plane's alone", () => {
    for (const kind of CommandKind.options) {
      for (const phase of HostPhases[kind]) {
        expect(HostPhaseName.safeParse(phase).success, `${kind}: ${phase}`).toBe(true);
        expect(PhaseEvidence[phase as HostPhaseName], phase).toBeInstanceOf(z.ZodType);
      }
    }
    expect(PhaseName.options.filter((p) => !HostPhaseName.safeParse(p).success)).toEqual([
      "transfer",
      "smoke verify",
      "switch",
    ]);
  });

  it("names every evidence key in snake_case, like the rest of the API", () => {
    const schemas: Array<[string, z.ZodType]> = [
      ...Object.entries(PhaseEvidence),
      ["EnvironmentEvidence", EnvironmentEvidence],
      ["VerifyEvidence", VerifyEvidence],
      ...Object.entries(CommandResults),
    ];
    const paths = schemas.flatMap(([name, s]) => keysOf(s, name));
    expect(paths).toContain("EnvironmentEvidence.timings.create_ms");
    expect(paths).toContain("thaw.frozen_ms");
    expect(paths.filter((p) => !/^[a-z][a-z0-9_]*$/.test(lastKey(p)))).toEqual([]);
  });

  it("takes evidence only with the phase that ended, in that phase's shape", () => {
    expect(progress({ phase: "build" })).not.toThrow();
    expect(progress({ ended: "thaw", evidence: { frozen_ms: 41 }, phase: "record" })).not.toThrow();
    expect(progress({ phase: "bulid" })).toThrow();
    expect(progress({ phase: "build", evidence: { digests: {} } })).toThrow(
      "evidence comes with the phase that ended",
    );
    expect(progress({ ended: "thaw", evidence: { frozenMs: 41 } })).toThrow(/frozen_ms/);
    expect(progress({ ended: "thaw" })).toThrow();
    expect(progress({ ended: "switch", evidence: {} })).toThrow("switch is the control plane's own phase");
  });

  it("refuses an environment a host reports in another shape", () => {
    const env = {
      id: "shop/alpha",
      project: "shop",
      name: "alpha",
      status: "running",
      agent: { service: "api", user: "1000", workdir: "/work" },
      services: [{ name: "api", container_id: "c1", image: "shop-api", image_id: "sha256:1" }],
      network: { id: "n1", name: "denv-h1-shop-alpha", subnet: "10.213.0.0/24", gateway: "10.213.0.1" },
      evidence: {
        placement: { host: "h1", reason: "the host this runtime drives" },
        network: { name: "denv-h1-shop-alpha", subnet: "10.213.0.0/24", internal: true },
        volumes: { method: "copy", from: null },
        images: { api: "sha256:1" },
        timings: { create_ms: 90, start_ms: 400, health_ms: 1, probe_ms: 0, total_ms: 500 },
        probe: { skipped: "egress allowed (service project)" },
      },
    };
    expect(HostEnvironment.safeParse(env).error).toBeUndefined();
    const camel = {
      ...env,
      services: [{ name: "api", containerId: "c1", image: "shop-api", imageId: "sha256:1" }],
    };
    expect(HostEnvironment.safeParse(camel).success).toBe(false);
    const oldEvidence = { ...env, evidence: { ...env.evidence, timings: { createMs: 90, totalMs: 500 } } };
    expect(CommandResults["env.deploy"].safeParse(oldEvidence).success).toBe(false);
  });
});
