import type { Readable } from "node:stream";
import {
  ControlPlaneMessages,
  checkName,
  DenvError,
  type Deployment,
  type DeploymentKind,
  type ForkRequest,
  parseVersionRef,
  type RollbackRequest,
} from "@denv/spec";
import type { z } from "zod";
import type { DeploymentEngine } from "../engine/engine.js";
import { newId, nowIso, randomToken } from "../ids.js";
import type { DeploymentRecord, EnvironmentRecord, LogRecord } from "../store/records.js";
import type { Store } from "../store/store.js";
import { assertScope, NotFound, type Principal } from "./access.js";
import { presentDeployment } from "./present.js";
import type { ProjectService } from "./project-service.js";
import { spoolSource } from "./source-spool.js";
import { LOCAL_TARGET } from "./target-service.js";

export interface DeploymentServiceOptions {
  spoolDir: string;
  maxSourceBytes: number;
}

export interface FollowSink {
  entry(e: LogRecord): void;
  done(d: Deployment): void;
}

export type DeploySource =
  | { kind: "tar"; body: Readable; sourceSha256?: string }
  | { kind: "git"; ref: string };

/** Turns API requests into deployments (checking what can be checked at once) and reads them back. */
export class DeploymentService {
  constructor(
    private readonly store: Store,
    private readonly engine: DeploymentEngine,
    private readonly projects: ProjectService,
    private readonly options: DeploymentServiceOptions,
    /** A connected project's clone URL (GitHub), which wins over the project's repo. */
    private readonly gitRepo?: (project: string) => Promise<string | undefined>,
  ) {}

  async deploy(
    p: Principal,
    project: string,
    q: { environment: string; target?: string | undefined; placement?: Record<string, string> | undefined },
    source: DeploySource,
    /** A caller's own id for the deployment (a GitHub delivery's), so it is created once. */
    id = newId("dep"),
  ): Promise<Deployment> {
    const proj = await this.projects.require(p, project);
    checkName("environment", q.environment);
    const target = q.target ?? LOCAL_TARGET;
    if (!(await this.store.getTarget(target))) throw NotFound.target(target);
    if (source.kind === "git") {
      // The host that builds fetches the commit itself (the engine adds a connected project's
      // installation token when it sends the command): the cp holds no copy of the source.
      const repo = (await this.gitRepo?.(project)) ?? proj.repo;
      if (!repo) throw new DenvError("invalid_request", ControlPlaneMessages.noRepo(project));
      const d = await this.engine.create({
        id,
        kind: "deploy",
        project,
        environment: `${project}/${q.environment}`,
        request: {
          target,
          compose_file: proj.composePath,
          git: { url: repo, ref: source.ref, max_bytes: this.options.maxSourceBytes },
          ...(q.placement ? { placement: q.placement } : {}),
        },
      });
      return presentDeployment(d);
    }
    const startedAt = nowIso();
    const spooled = await spoolSource(source.body, this.options.spoolDir, id, this.options.maxSourceBytes);
    const spool = source.sourceSha256
      ? { ...spooled, evidence: { ...spooled.evidence, source_sha256: source.sourceSha256 } }
      : spooled;
    const d = await this.engine.create({
      id,
      kind: "deploy",
      project,
      environment: `${project}/${q.environment}`,
      request: {
        target,
        compose_file: proj.composePath,
        spool: spool.path,
        source: spool.evidence,
        ...(q.placement ? { placement: q.placement } : {}),
      },
      done: [{ name: "resolve source", startedAt, evidence: { ...spool.evidence } }],
    });
    return presentDeployment(d);
  }

  async fork(
    p: Principal,
    project: string,
    env: string,
    req: z.output<typeof ForkRequest>,
  ): Promise<Deployment> {
    const d = await this.startFork(p, project, env, req.version, req.name);
    return presentDeployment(d);
  }

  /** A fork of `version` (or of what `sourceEnv` runs) as a new environment; for sandboxes too. */
  async startFork(
    p: Principal,
    project: string,
    sourceEnv: string | undefined,
    versionRef: string | undefined,
    name: string | undefined,
    sandbox?: { expires_at: string },
    pool?: boolean,
  ): Promise<DeploymentRecord> {
    await this.projects.require(p, project);
    const version = await this.resolveVersion(p, project, sourceEnv, versionRef);
    const forkName = checkName(
      "environment",
      name ?? `${sandbox ? "sbx" : "fork"}-${randomToken(4).slice(0, 6)}`,
    );
    const id = `${project}/${forkName}`;
    if (await this.store.getEnvironment(id)) throw new DenvError("conflict", `environment ${id} exists`);
    return this.engine.create({
      kind: "fork",
      project,
      environment: id,
      request: {
        version,
        ...(sourceEnv ? { source_environment: `${project}/${sourceEnv}` } : {}),
        sandbox: sandbox || undefined,
        ...(pool ? { pool: true } : {}),
      },
    });
  }

  async rollback(
    p: Principal,
    project: string,
    env: string,
    req: z.output<typeof RollbackRequest>,
  ): Promise<Deployment> {
    await this.requireEnvironment(p, project, env);
    const version = await this.resolveVersion(p, project, undefined, req.version);
    const d = await this.engine.create({
      kind: "rollback",
      project,
      environment: `${project}/${env}`,
      request: { version },
    });
    return presentDeployment(d);
  }

  /** snapshot, verify, stop, start, destroy: a deployment of an existing environment. */
  async change(
    p: Principal,
    project: string,
    env: string,
    kind: Extract<DeploymentKind, "snapshot" | "verify" | "stop" | "start" | "destroy">,
  ): Promise<DeploymentRecord> {
    const e = await this.requireEnvironment(p, project, env);
    return this.engine.create({ kind, project, environment: e.id, request: {} });
  }

  async get(p: Principal, id: string): Promise<Deployment> {
    return presentDeployment(await this.require(p, id));
  }

  async require(p: Principal, id: string): Promise<DeploymentRecord> {
    const d = await this.store.getDeployment(id);
    if (!d) throw NotFound.deployment(id);
    assertScope(p, d.project, () => NotFound.deployment(id));
    return d;
  }

  async list(p: Principal, project: string): Promise<Deployment[]> {
    await this.projects.require(p, project);
    return (await this.store.listDeployments({ project })).map(presentDeployment);
  }

  /**
   * Replays a deployment's phase changes and log lines after `afterSeq`, then follows it live
   * until it is done. Returns the unsubscribe function.
   */
  async follow(p: Principal, id: string, afterSeq: number, sink: FollowSink): Promise<() => void> {
    await this.require(p, id);
    let last = afterSeq;
    let replaying = true;
    let doneSent = false;
    const held: LogRecord[] = [];
    let finished: DeploymentRecord | undefined;
    const emit = (e: LogRecord) => {
      if (e.seq <= last) return;
      last = e.seq;
      sink.entry(e);
    };
    const done = (d: DeploymentRecord) => {
      if (doneSent) return;
      doneSent = true;
      sink.done(presentDeployment(d));
    };
    // Subscribe first and hold live events while the past is read, so nothing falls in between.
    const unsubscribe = this.engine.subscribe(id, {
      entry: (e) => (replaying ? held.push(e) : emit(e)),
      done: (d) => {
        if (replaying) finished = d;
        else done(d);
      },
    });
    for (const e of await this.store.listLogs(id, afterSeq)) emit(e);
    replaying = false;
    for (const e of held) emit(e);
    if (finished) done(finished);
    else {
      const now = await this.store.getDeployment(id);
      if (now && (now.status === "succeeded" || now.status === "failed")) {
        for (const e of await this.store.listLogs(id, last)) emit(e);
        done(now);
      }
    }
    return unsubscribe;
  }

  /** Waits for a deployment to finish and returns it as it ended. */
  async wait(id: string): Promise<DeploymentRecord> {
    const d = await this.engine.wait(id);
    if (!d) throw NotFound.deployment(id);
    return d;
  }

  async requireEnvironment(p: Principal, project: string, env: string): Promise<EnvironmentRecord> {
    const id = `${project}/${env}`;
    assertScope(p, project, () => NotFound.environment(id));
    const e = await this.store.getEnvironment(id);
    if (!e) throw NotFound.environment(id);
    return e;
  }

  /** `PROJECT@vN`, `N`, or (absent) the version `sourceEnv` runs, else the project's newest. */
  async resolveVersion(
    p: Principal,
    project: string,
    sourceEnv: string | undefined,
    ref: string | undefined,
  ): Promise<string> {
    if (ref !== undefined) {
      const number = /^\d+$/.test(ref) ? Number(ref) : parseVersionRef(ref).number;
      if (!/^\d+$/.test(ref) && parseVersionRef(ref).project !== project) throw NotFound.version(ref);
      const v = await this.store.getVersion(project, number);
      if (!v) throw NotFound.version(`${project}@v${number}`);
      return v.id;
    }
    if (sourceEnv !== undefined) {
      const e = await this.requireEnvironment(p, project, sourceEnv);
      if (!e.version)
        throw new DenvError("conflict", `environment ${e.id} runs no version yet: deploy it first`);
      return e.version;
    }
    const newest = (await this.store.listVersions(project))[0];
    if (!newest) throw new DenvError("conflict", `project ${project} has no version yet: deploy it first`);
    return newest.id;
  }
}
