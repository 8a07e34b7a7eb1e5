import { randomBytes } from "node:crypto";
import { type CommandKind, Phases } from "@denv/spec";

/** Canned but realistic results and progress of the fake host, shaped as denvd answers. */

const hex = (n: number) => randomBytes(n).toString("hex");

export interface HeldEnv {
  id: string;
  status: "running" | "stopped" | "failed";
  parent_version?: string;
}

export function hostEnvironment(id: string, status: HeldEnv["status"], parentVersion?: string) {
  const [project = "p"] = id.split("/");
  return {
    id,
    project,
    name: id.split("/")[1],
    status,
    ...(parentVersion ? { parent_version: parentVersion } : {}),
    agent: { service: "api", user: "1000", workdir: "/work" },
    services: ["api", "redis"].map((name) => ({
      name,
      container_id: hex(32),
      image: `denv/${project}-${name}:latest`,
      image_id: `sha256:${hex(32)}`,
    })),
    network: {
      id: hex(32),
      name: `denv-${id.replace("/", "-")}`,
      subnet: "10.213.4.0/24",
      gateway: "10.213.4.1",
    },
    evidence: {
      health: { api: "healthy", redis: "healthy" },
      probe: { ok: true, findings: [] },
      caps: { api: { memory_bytes: 2147483648, cpus: 2, pids: 1024 } },
    },
  };
}

export function hostVersion(project: string, number: number, source: string) {
  return {
    id: `${project}@v${number}`,
    project,
    number,
    host_id: "ignored-by-the-cp",
    source_environment: source,
    digests: { api: `sha256:${hex(32)}`, redis: `sha256:${hex(32)}` },
    volumes: { data: { snapshot: `${project}-v${number}-data-${hex(3)}`, bytes: 40960 } },
    method: "btrfs",
    sizes: { layer_bytes: 8192, volume_bytes: 40960 },
    timings: { flush_ms: 3, frozen_ms: 41, commit_ms: 30, volumes_ms: 8, squash_ms: 0, total_ms: 52 },
    created_at: new Date().toISOString(),
  };
}

export function verifyResult(project: string, env: string) {
  return {
    status: "graded",
    reward: 1,
    rewards: { tests: 1 },
    log: "2 passed\n",
    version: `${project}@v900`,
    fork: `${project}/verify-${hex(3)}`,
    evidence: {
      agent: { killed: 2, survivors: 0 },
      verifier: { user: "verifier", exitCode: 0, timedOut: false, durationMs: 120 },
      environment: env,
    },
  };
}

/** The phases a command reports, as denvd's runtime calls them (start, and evidence at the end). */
export const PROGRESS: Partial<Record<CommandKind, readonly string[]>> = {
  "env.deploy": ["validate", "build", "start", "health", "probe"],
  "env.fork": ["restore", "start", "health", "probe"],
  "env.snapshot": ["freeze", "capture layers", "capture volumes", "thaw", "record"],
  "env.verify": Phases.verify,
  "env.start": ["start", "health", "probe"],
  "env.stop": ["stop"],
  "env.destroy": ["destroy"],
};
