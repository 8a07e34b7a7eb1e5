import { randomBytes } from "node:crypto";
import type {
  CommandResult,
  EgressProbe,
  HostEnvironment,
  HostPhaseName,
  PhaseEvidence,
  Reservation,
  Version,
} from "@denv/spec";

/** Canned but realistic results and phase evidence of the fake host, shaped as denvd answers. */

const hex = (n: number) => randomBytes(n).toString("hex");

export interface HeldEnv {
  id: string;
  status: "running" | "stopped" | "failed";
  parent_version?: string;
}

const SERVICES = ["api", "redis"];

function probe(network: string): EgressProbe {
  return {
    ok: true,
    findings: [],
    network: { name: network, internal: true, reject_rule: true },
    services: SERVICES.map((service) => ({
      service,
      routes: ["10.213.4.0/24 dev eth0"],
      default_route: false,
      route_out: false,
      canary_reached: false,
      nameservers: ["127.0.0.11"],
      networks: [network],
    })),
    duration_ms: 12,
  };
}

/** What each of the fake host's environments reports reserving (its two services' caps). */
export const FAKE_CAPS: Reservation = { memory_bytes: 1024 ** 3, cpus: 1, pids: 512 };

export function hostEnvironment(
  id: string,
  status: HeldEnv["status"],
  parentVersion?: string,
  caps: Reservation = FAKE_CAPS,
): HostEnvironment {
  const [project = "p", name = "alpha"] = id.split("/");
  const network = `denv-${id.replace("/", "-")}`;
  const services = SERVICES.map((svc) => ({
    name: svc,
    container_id: hex(32),
    image: `denv/${project}-${svc}:latest`,
    image_id: `sha256:${hex(32)}`,
  }));
  return {
    id,
    project,
    name,
    status,
    parent_version: parentVersion || undefined,
    agent: { service: "api", user: "1000", workdir: "/work" },
    services,
    network: { id: hex(32), name: network, subnet: "10.213.4.0/24", gateway: "10.213.4.1" },
    evidence: {
      placement: { host: "fake", reason: "the host this runtime drives" },
      network: { name: network, subnet: "10.213.4.0/24", internal: true },
      volumes: { method: "btrfs", from: parentVersion ?? null },
      images: Object.fromEntries(services.map((s) => [s.name, s.image_id])),
      timings: { create_ms: 90, start_ms: 400, health_ms: 1000, probe_ms: 12, total_ms: 1510 },
      probe: probe(network),
      caps,
    },
  };
}

export function hostVersion(project: string, number: number, source: string): Version {
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

export function verifyResult(env: string, snapshot: Version): CommandResult<"env.verify"> {
  const fork = `${snapshot.project}/verify-${hex(3)}`;
  return {
    status: "graded",
    reward: 1,
    rewards: { tests: 1 },
    log: "2 passed\n",
    version: snapshot.id,
    fork,
    evidence: {
      agent: { killed: 2, survivors: 0 },
      snapshot: { version: snapshot.id, method: snapshot.method, frozen_ms: 41, total_ms: 52 },
      fork: { environment: fork, probe: probe(`denv-${fork.replace("/", "-")}`) },
      submission: [{ path: "/work/answer.txt", entries: 1, bytes: 3 }],
      verifier: {
        container_id: hex(32),
        image: `sha256:${hex(32)}`,
        user: "1001",
        exit_code: 0,
        timed_out: false,
        duration_ms: 120,
      },
      timings: { total_ms: 2100 },
    },
    snapshot: { ...snapshot, source_environment: env },
  };
}

/** What the fake host's command produced, for the evidence of its phases. */
export interface Produced {
  host: string;
  env?: HostEnvironment;
  version?: Version;
  verify?: CommandResult<"env.verify">;
}

/** The evidence denvd sends when `phase` ends, taken from what the command produced. */
export function phaseEvidence<P extends HostPhaseName>(phase: P, r: Produced): PhaseEvidence<P> {
  const byService = (f: (s: HostEnvironment["services"][number]) => string) =>
    Object.fromEntries((r.env?.services ?? []).map((s) => [s.name, f(s)]));
  const v = r.version ?? r.verify?.snapshot;
  const all: { [Q in HostPhaseName]: PhaseEvidence<Q> } = {
    "resolve source": { source: { entries: 3, bytes: 10240, compressed: false } },
    validate: { services: SERVICES, agent: "api" },
    build: { digests: byService((s) => s.image_id) },
    place: { host: r.host },
    restore: { version: r.env?.parent_version ?? "", method: "btrfs" },
    start: { containers: byService((s) => s.container_id) },
    health: { services: SERVICES },
    probe: r.verify?.evidence.fork.probe ?? r.env?.evidence.probe ?? { skipped: "no environment" },
    snapshot: r.verify?.evidence.snapshot ?? { version: "", method: "btrfs", frozen_ms: 0, total_ms: 0 },
    freeze: { paused: SERVICES },
    "capture layers": { committed: SERVICES },
    "capture volumes": { volumes: ["data"] },
    thaw: { frozen_ms: 41 },
    record: {
      version: v?.id ?? "",
      method: v?.method ?? "btrfs",
      sizes: { layer_bytes: 8192, volume_bytes: 40960 },
      timings: { flush_ms: 3, frozen_ms: 41, commit_ms: 30, volumes_ms: 8, squash_ms: 0, total_ms: 52 },
    },
    "stop agent": r.verify?.evidence.agent ?? { killed: 0, survivors: 0 },
    fork: { environment: r.verify?.fork ?? "" },
    "run verifier": r.verify?.evidence.verifier ?? {
      container_id: "",
      image: "",
      user: "1001",
      exit_code: null,
      timed_out: false,
      duration_ms: 0,
    },
    collect: { reward: r.verify?.reward ?? null },
    "clean up": { removed: [`fork ${r.verify?.fork ?? ""}`] },
    stop: { stopped: [...SERVICES].reverse() },
    destroy: { services: SERVICES, volumes: ["data"] },
    connect: { address: "10.213.4.3:8080" },
    connected: { bytes_to_service: 0, bytes_from_service: 0 },
  };
  return all[phase];
}
