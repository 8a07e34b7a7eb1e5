import { CommandResults, type Plan } from "@denv/spec";
import { describe, expect, it } from "vitest";
import type { EnvironmentRecord } from "../records.js";
import { hostEnvironment } from "./host-reports.js";

/** No Docker: records -> what a host reports, in the shape spec's protocol checks. */

const plan = {
  agent: { service: "app", user: "1000", workdir: "/workspace" },
  services: [
    { name: "db", image: "postgres:16" },
    { name: "app", image: "quickstart-app" },
  ],
} as unknown as Plan;

function record(evidence: Record<string, unknown>): EnvironmentRecord {
  return {
    id: "quickstart/alpha",
    project: "quickstart",
    name: "alpha",
    plan,
    status: "running",
    command: "cmd-1",
    network: { id: "n1", name: "denv-h1-quickstart-alpha", subnet: "10.213.0.0/24", gateway: "10.213.0.1" },
    containers: { db: "c-db", app: "c-app" },
    volumes: {},
    images: {
      db: { image: "postgres:16", imageId: "sha256:db", repoDigests: [], layers: 3 },
      app: { image: "quickstart-app", imageId: "sha256:app", repoDigests: [], layers: 5 },
    },
    baseline: {},
    createdAt: "2026-01-01T00:00:00.000Z",
    evidence,
  };
}

const common = {
  placement: { host: "h1", reason: "the host this runtime drives" },
  network: { name: "denv-h1-quickstart-alpha", subnet: "10.213.0.0/24", internal: true },
  volumes: { method: "copy", from: null },
  images: { db: "sha256:db", app: "sha256:app" },
};

describe("hostEnvironment", () => {
  it("reports a record as spec's HostEnvironment", () => {
    const env = hostEnvironment(
      record({
        ...common,
        timings: { create_ms: 1, start_ms: 2, health_ms: 3, probe_ms: 0, total_ms: 6 },
        probe: { skipped: "egress allowed (service project)" },
      }),
    );
    expect(CommandResults["env.deploy"].safeParse(env).error).toBeUndefined();
    expect(env.services).toEqual([
      { name: "db", container_id: "c-db", image: "postgres:16", image_id: "sha256:db" },
      { name: "app", container_id: "c-app", image: "quickstart-app", image_id: "sha256:app" },
    ]);
  });

  it("reads the camelCase evidence of records written before it was snake_case", () => {
    const env = hostEnvironment(
      record({
        ...common,
        timings: { createMs: 1, startMs: 2, healthMs: 3, probeMs: 4, totalMs: 10 },
        probe: {
          ok: true,
          findings: [],
          network: { name: "denv-h1-quickstart-alpha", internal: true, rejectRule: true },
          services: [
            {
              service: "app",
              routes: ["10.213.0.0/24 dev eth0"],
              defaultRoute: false,
              routeOut: false,
              canaryReached: false,
              nameservers: ["127.0.0.11"],
              networks: ["denv-h1-quickstart-alpha"],
            },
          ],
          durationMs: 4,
        },
      }),
    );
    expect(CommandResults["env.deploy"].safeParse(env).error).toBeUndefined();
    expect(env.evidence.timings).toEqual({
      create_ms: 1,
      start_ms: 2,
      health_ms: 3,
      probe_ms: 4,
      total_ms: 10,
    });
    expect(env.evidence.probe).toMatchObject({ duration_ms: 4, network: { reject_rule: true } });
  });
});
