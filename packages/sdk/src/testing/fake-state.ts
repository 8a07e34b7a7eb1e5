import {
  DenvError,
  type Deployment,
  type DeploymentKind,
  type Environment,
  type Host,
  type Phase,
  Phases,
  type Project,
  TARGET_KINDS,
  type Target,
  type Version,
} from "@denv/spec";

/**
 * The in-memory state of the fake control plane and its deployment engine: every deployment
 * walks its kind's phases (spec Phases) with a small delay, emitting the events the SSE log
 * route replays, so that clients see what they would see from the real one.
 */

export interface TokenInfo {
  id: string;
  name: string;
  role: "admin" | "member";
  project?: string;
}

export interface JoinTokenRecord {
  id: string;
  target: string;
  uses_left: number;
  expires_at: string;
  revoked_at?: string;
  created_at: string;
}

export type LogEvent = { event: "phase" | "log" | "done"; data: unknown };

interface DeploymentRecord {
  deployment: Deployment;
  events: LogEvent[];
  listeners: Set<(e: LogEvent) => void>;
}

export interface FailureInjection {
  kind: DeploymentKind;
  phase: string;
  code: string;
  message: string;
}

const now = () => new Date().toISOString();

export class FakeState {
  readonly tokens = new Map<string, TokenInfo>();
  readonly projects = new Map<string, Project>();
  readonly environments = new Map<string, Environment>();
  readonly versions = new Map<string, Version>();
  readonly targets = new Map<string, Target>();
  readonly hosts = new Map<string, Host>();
  /** Join tokens as they are listed (without their secrets), by id. */
  readonly joinTokens = new Map<string, JoinTokenRecord>();
  readonly deployments = new Map<string, DeploymentRecord>();
  /** Names of the files of the last deploy upload, for tests to inspect. */
  lastUpload: string[] = [];
  /** The ?placement= of the last deploy. */
  lastPlacement: string | undefined;
  /** The `target` query of the last deploy. */
  lastTarget: string | undefined;
  phaseDelayMs: number;
  /** Whether the log route numbers its events (SSE id) and honours Last-Event-ID. */
  sseIds = true;
  failures: FailureInjection[] = [];
  #ids = 0;

  constructor(phaseDelayMs: number) {
    this.phaseDelayMs = phaseDelayMs;
    // What the cp answers for a hosts target: denvd's row of the capability table.
    const caps = { ...TARGET_KINDS.hosts.capabilities };
    this.targets.set("local", {
      name: "local",
      kind: "hosts",
      capabilities: caps,
      settings: {},
      credentials: [],
      created_at: now(),
    });
    this.hosts.set("host-1", {
      id: "host-1",
      target: "local",
      status: "online",
      version: "0.1.0",
      labels: {},
      environments: 0,
      draining: false,
      created_at: now(),
    });
  }

  nextId(prefix: string): string {
    this.#ids++;
    return `${prefix}_${this.#ids}`;
  }

  project(name: string): Project {
    const p = this.projects.get(name);
    if (p === undefined) throw new DenvError("not_found", `project '${name}' does not exist`);
    return p;
  }

  environment(id: string): Environment {
    const env = this.environments.get(id);
    if (env === undefined || env.status === "destroyed") {
      throw new DenvError("not_found", `environment '${id}' does not exist`);
    }
    return env;
  }

  newEnvironment(project: string, name: string, version: string | undefined, sandbox = false): Environment {
    const kind = this.project(project).kind;
    const env: Environment = {
      id: `${project}/${name}`,
      project,
      name,
      status: "pending",
      host_id: "host-1",
      version,
      sandbox,
      services: [
        { name: "main", container_id: this.nextId("c"), image: "ubuntu:24.04", image_id: "sha256:aaa" },
        { name: "db", container_id: this.nextId("c"), image: "postgres:16", image_id: "sha256:bbb" },
      ],
      agent: { service: "main", user: kind === "rl-environment" ? "1000" : "root", workdir: "/workspace" },
      reachable: true,
      created_at: now(),
    };
    this.environments.set(env.id, env);
    return env;
  }

  newVersion(env: Environment): Version {
    const number = [...this.versions.values()].filter((v) => v.project === env.project).length + 1;
    const version: Version = {
      id: `${env.project}@v${number}`,
      project: env.project,
      number,
      host_id: "host-1",
      source_environment: env.id,
      parent_version: env.version,
      digests: { main: "sha256:aaa", db: "sha256:bbb" },
      volumes: { pgdata: { snapshot: "snap-1", bytes: 4096 } },
      method: "copy",
      sizes: { layer_bytes: 1024, volume_bytes: 4096 },
      timings: { freeze: 1 },
      created_at: now(),
      replicas: ["host-1"],
    };
    this.versions.set(version.id, version);
    return version;
  }

  /**
   * Starts a deployment: queued now, its phases run after the response is sent. `work` runs
   * when every phase succeeded and gives the deployment's result.
   */
  startDeployment(kind: DeploymentKind, environment: string, work: () => unknown): Deployment {
    const project = environment.split("/")[0] ?? "";
    const deployment: Deployment = {
      id: this.nextId("dep"),
      kind,
      project,
      environment,
      status: "queued",
      phases: Phases[kind].map((name) => ({ name, status: "pending" as const })),
      host_id: "host-1",
      created_at: now(),
    };
    const record: DeploymentRecord = { deployment, events: [], listeners: new Set() };
    this.deployments.set(deployment.id, record);
    setTimeout(() => void this.#run(record, work), this.phaseDelayMs);
    return structuredClone(deployment);
  }

  async #run(record: DeploymentRecord, work: () => unknown): Promise<void> {
    const d = record.deployment;
    d.status = "running";
    const failureAt = this.failures.findIndex((f) => f.kind === d.kind);
    const failure = failureAt === -1 ? undefined : this.failures.splice(failureAt, 1)[0];
    for (const phase of d.phases) {
      // One host holds every version: a fork never needs to move one. No project of the fake
      // asks for a smoke verify (x-denv.verifier.smoke).
      if (phase.name === "transfer" || phase.name === "smoke verify") {
        phase.status = "skipped";
        continue;
      }
      phase.status = "running";
      phase.started_at = now();
      this.#emit(record, { event: "phase", data: { ...phase } });
      await new Promise((r) => setTimeout(r, this.phaseDelayMs));
      this.#emit(record, { event: "log", data: { line: `${phase.name}: done` } });
      if (failure !== undefined && failure.phase === phase.name) {
        this.#finishPhase(record, phase, "failed");
        d.status = "failed";
        d.error = { code: failure.code, message: failure.message };
        break;
      }
      this.#finishPhase(record, phase, "succeeded");
    }
    if (d.status !== "failed") {
      try {
        d.result = work();
        d.status = "succeeded";
      } catch (err) {
        d.status = "failed";
        d.error = { code: "internal", message: (err as Error).message };
      }
    }
    for (const phase of d.phases) if (phase.status === "pending") phase.status = "skipped";
    d.finished_at = now();
    this.#emit(record, { event: "done", data: structuredClone(d) });
  }

  #finishPhase(record: DeploymentRecord, phase: Phase, status: "succeeded" | "failed"): void {
    phase.status = status;
    phase.finished_at = now();
    phase.duration_ms = this.phaseDelayMs;
    phase.evidence = { fake: true };
    this.#emit(record, { event: "phase", data: { ...phase } });
  }

  #emit(record: DeploymentRecord, event: LogEvent): void {
    record.events.push(event);
    for (const listener of record.listeners) listener(event);
  }

  deployment(id: string): DeploymentRecord {
    const record = this.deployments.get(id);
    if (record === undefined) throw new DenvError("not_found", `deployment '${id}' does not exist`);
    return record;
  }

  /** Resolves when the deployment has finished (for `?wait=true`). */
  finished(id: string): Promise<Deployment> {
    const record = this.deployment(id);
    const d = record.deployment;
    if (d.status === "succeeded" || d.status === "failed") return Promise.resolve(structuredClone(d));
    return new Promise((resolve) => {
      const listener = (e: LogEvent) => {
        if (e.event !== "done") return;
        record.listeners.delete(listener);
        resolve(structuredClone(record.deployment));
      };
      record.listeners.add(listener);
    });
  }
}
