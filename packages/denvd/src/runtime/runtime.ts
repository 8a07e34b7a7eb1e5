import { randomBytes } from "node:crypto";
import { rm } from "node:fs/promises";
import { join, resolve } from "node:path";
import type { Readable } from "node:stream";
import type { HostEnvironment, HostVerifyResult, Plan, ProjectKind } from "@denv/spec";
import { DenvError } from "@denv/spec/errors";
import { HostRefusals } from "@denv/spec/messages";
import { checkName } from "@denv/spec/names";
import type { RawExecResult } from "../exec-runner.js";
import { removeHostPort } from "../host/firewall.js";
import type { ProbeResult } from "../probe.js";
import { collectGarbage } from "./collect-garbage.js";
import type { ExecOptions } from "./environment-exec.js";
import type { FilesTarget } from "./environment-files.js";
import {
  type HostContext,
  openHostContext,
  type RuntimeOptions,
  requireEnvironment,
  requireVersion,
} from "./host-context.js";
import { hostEnvironment, type VersionInfo, versionInfo } from "./host-reports.js";
import { noPhases, type PhaseListener } from "./phase-listener.js";
import { watchRestarts } from "./restart-watch.js";
import type { EpisodePort, VerifyOptions } from "./verify-environment.js";

/**
 * The modules behind the verbs, loaded at the first verb: a host that only opened its runtime
 * (an idle denvd) holds none of them, nor the compose validator, yaml and tar-stream they use
 * (README, "Memory").
 */
const verbs = () => import("./verbs.js");

export interface DeployRequest {
  project: string;
  environment?: string;
  projectDir: string;
  composeFile?: string;
  /** A plan validated elsewhere; otherwise the project's compose file is read. */
  plan?: Plan;
  /** Variables for compose interpolation (default: none; denvd's own environment never reaches a file). */
  env?: Record<string, string | undefined>;
  /** Id of the command that asked (labels what it creates). */
  command?: string;
  /** The project's kind as its admin set it; a file asking for another kind is refused. */
  kind?: ProjectKind | undefined;
  onPhase?: PhaseListener;
}

/**
 * The mirror proxies of running environments with x-denv.egress: mirrors, on the ports their
 * agents were given (a proxy lives in denvd's process; a restart must not cut the episode off).
 */
async function reopenAgentEgress(ctx: HostContext): Promise<void> {
  for (const rec of await ctx.records.environments()) {
    if (rec.plan.egress !== "mirrors" || rec.egressProxyPort === undefined) continue;
    try {
      const { openMirrorEgress } = await verbs();
      await removeHostPort(rec.network.id, rec.network.gateway, rec.egressProxyPort);
      ctx.agentEgress.set(
        rec.id,
        await openMirrorEgress(rec.network, ctx.settings.buildMirrors, rec.egressProxyPort),
      );
    } catch (err) {
      ctx.log(`${rec.id}: cannot reopen its mirror proxy: ${(err as Error).message}`);
    }
  }
}

function newId(): string {
  return randomBytes(4).toString("hex");
}

/**
 * One host's runtime: stands compose environments up on the local Docker Engine with the five
 * protections, snapshots them consistently and forks them. The control plane drives it through
 * denvd's stream; tests and benchmarks drive it as a library. Each verb is a module of this
 * folder; this facade takes the environment's lock and looks its record up.
 */
export class Runtime {
  private stopWatch: () => void = () => undefined;

  private constructor(
    /** What the runtime's modules share: engine client, records, store, identity, locks. */
    readonly host: HostContext,
    /** The options it was opened with (a second runtime on the same state opens with them). */
    readonly options: RuntimeOptions,
  ) {}

  /** Connects to Docker, opens the volume store and collects what this host no longer owns. */
  static async open(options: RuntimeOptions): Promise<Runtime> {
    const rt = new Runtime(await openHostContext(options), options);
    await rt.gc();
    await reopenAgentEgress(rt.host);
    rt.stopWatch = await watchRestarts(rt.host);
    return rt;
  }

  async close(): Promise<void> {
    this.stopWatch();
    await this.host.canary.close();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  // ---------------------------------------------------------------- deploy and fork

  /** Builds the project's images, then stands a fresh environment up (PROJECT/ENV, alpha by default). */
  async deploy(req: DeployRequest): Promise<HostEnvironment> {
    const ctx = this.host;
    const project = checkName("project", req.project);
    const name = checkName("environment", req.environment ?? "alpha");
    const id = `${project}/${name}`;
    const command = req.command ?? `deploy-${newId()}`;
    const projectDir = resolve(req.projectDir);
    const phase = req.onPhase ?? noPhases;
    const { buildImages, decideDiskCaps, deployPlan, materialize, sandboxRuntime, tarDirectory, undoable } =
      await verbs();
    phase.start("validate");
    const plan = deployPlan(project, projectDir, req);
    // Caps and a sandbox the host cannot give are refused before anything is built.
    await decideDiskCaps(ctx, plan);
    await sandboxRuntime(ctx, plan);
    phase.end("validate", {
      services: plan.services.map((s) => s.name),
      agent: plan.agent.service,
      ...(plan.pool !== undefined ? { pool: plan.pool } : {}),
      ...(plan.verifier?.smoke ? { smoke: plan.verifier.smoke } : {}),
    });
    return ctx.locks.with(id, async () => {
      if (await ctx.records.getEnvironment(id)) {
        throw new DenvError("conflict", HostRefusals.environmentExists(id));
      }
      return undoable(ctx.log, async (undo) => {
        phase.start("build");
        const { images, verifierImage, evidence } = await buildImages(
          ctx,
          project,
          plan,
          projectDir,
          command,
        );
        const digests = Object.fromEntries(Object.entries(images).map(([svc, img]) => [svc, img.imageId]));
        phase.end("build", { digests, ...(evidence ? { builds: evidence } : {}) });
        let testsTar: string | undefined;
        if (plan.verifier?.tests) {
          const file = join(ctx.stateDir, "tests", `${project}-${newId()}.tar`);
          await tarDirectory(join(projectDir, plan.verifier.tests), file);
          undo.push(`tests archive ${file}`, () => rm(file, { force: true }));
          testsTar = file;
        }
        const base = { id, project, name, plan, command, images, verifierImage, testsTar };
        const rec = await materialize(ctx, base, undefined, undo, phase);
        if (evidence) {
          rec.evidence = { ...rec.evidence, build: evidence };
          await ctx.records.putEnvironment(rec);
        }
        return hostEnvironment(rec);
      });
    });
  }

  /**
   * A new environment from a version: its services start fresh from the version's disk state.
   * `start: false` creates them without starting any (a verify whose verifier reads only files).
   */
  async fork(
    versionId: string,
    opts: { name?: string; command?: string; onPhase?: PhaseListener; start?: boolean } = {},
  ): Promise<HostEnvironment> {
    const ctx = this.host;
    const { materialize, undoable } = await verbs();
    const version = await requireVersion(ctx, versionId);
    const name = checkName("environment", opts.name ?? `fork-${newId()}`);
    const id = `${version.project}/${name}`;
    return ctx.locks.with(id, async () => {
      if (await ctx.records.getEnvironment(id)) {
        throw new DenvError("conflict", HostRefusals.forkExists(id));
      }
      const base = {
        id,
        project: version.project,
        name,
        plan: version.plan,
        command: opts.command ?? `fork-${newId()}`,
        images: version.images,
        parentVersion: version.id,
        verifierImage: version.verifierImage,
        testsTar: version.testsTar,
      };
      return undoable(ctx.log, async (undo) =>
        hostEnvironment(
          await materialize(ctx, base, version, undo, opts.onPhase ?? noPhases, {
            start: opts.start ?? true,
          }),
        ),
      );
    });
  }

  // ---------------------------------------------------------------- exec and files

  async exec(envId: string, o: ExecOptions): Promise<RawExecResult> {
    const { execInEnvironment } = await verbs();
    return execInEnvironment(this.host.docker, await requireEnvironment(this.host, envId), o);
  }

  /** Extracts a tar archive into `dir` as the target user, after the special-file check. */
  async putFiles(envId: string, dir: string, archive: Readable | Buffer, t: FilesTarget = {}) {
    const { putFiles } = await verbs();
    return putFiles(this.host.docker, await requireEnvironment(this.host, envId), dir, archive, t);
  }

  /** A tar archive of `path`, read as the target user. */
  async getFiles(envId: string, path: string, t: FilesTarget = {}): Promise<Readable> {
    const { getFiles } = await verbs();
    return getFiles(this.host.docker, await requireEnvironment(this.host, envId), path, t);
  }

  async writeFile(
    envId: string,
    path: string,
    content: Buffer | string,
    t: FilesTarget & { mode?: number } = {},
  ) {
    const { writeFile } = await verbs();
    return writeFile(this.host.docker, await requireEnvironment(this.host, envId), path, content, t);
  }

  async readFile(envId: string, path: string, t: FilesTarget = {}): Promise<Buffer> {
    const { readFile } = await verbs();
    return readFile(this.host.docker, await requireEnvironment(this.host, envId), path, t);
  }

  // ---------------------------------------------------------------- snapshot and verify

  /** Freezes the whole environment at one point and records a version. */
  async snapshot(
    envId: string,
    opts: { command?: string; onPhase?: PhaseListener; number?: number | undefined } = {},
  ): Promise<VersionInfo> {
    const { snapshotEnvironment } = await verbs();
    return snapshotEnvironment(this.host, envId, opts);
  }

  /** Stops the agent, snapshots, forks, runs the verifier on the fork and returns its reward. */
  async verify(envId: string, opts: VerifyOptions = {}): Promise<HostVerifyResult> {
    const { verifyEnvironment } = await verbs();
    return verifyEnvironment(this.host, this.episode, envId, opts);
  }

  /** Protection 2, first step: every agent process killed and confirmed gone. */
  async stopAgent(envId: string): Promise<{ killed: number; survivors: number }> {
    const { stopAgent } = await verbs();
    return stopAgent(this.host.docker, await requireEnvironment(this.host, envId));
  }

  private readonly episode: EpisodePort = {
    environment: (envId) => requireEnvironment(this.host, envId),
    stopAgent: (envId) => this.stopAgent(envId),
    snapshot: (envId, opts) => this.snapshot(envId, opts),
    version: (versionId) => this.version(versionId),
    fork: (versionId, opts) => this.fork(versionId, opts),
    destroy: (envId) => this.destroy(envId),
  };

  // ---------------------------------------------------------------- lifecycle

  async stop(envId: string, opts: { onPhase?: PhaseListener } = {}): Promise<HostEnvironment> {
    const { stopEnvironment } = await verbs();
    return this.locked(envId, async (rec) => {
      await stopEnvironment(this.host, rec, opts.onPhase ?? noPhases);
      return hostEnvironment(rec);
    });
  }

  async start(envId: string, opts: { onPhase?: PhaseListener } = {}): Promise<HostEnvironment> {
    const { startEnvironment } = await verbs();
    return this.locked(envId, async (rec) => {
      await startEnvironment(this.host, rec, opts.onPhase ?? noPhases);
      return hostEnvironment(rec);
    });
  }

  /** Removes the environment's containers, network, firewall rule and volumes. Versions stay. */
  async destroy(envId: string, opts: { onPhase?: PhaseListener } = {}): Promise<void> {
    const { removeEnvironment } = await verbs();
    return this.locked(envId, (rec) => removeEnvironment(this.host, rec, opts.onPhase ?? noPhases));
  }

  /**
   * Removes a version: its committed images, volume snapshots and tests archive (when unshared);
   * or, for a version this host does not hold, what an unfinished transfer of it left.
   */
  async deleteVersion(versionId: string): Promise<void> {
    const { deleteVersion, discardTransfer } = await verbs();
    if (!(await this.host.records.getVersion(versionId)) && (await discardTransfer(this.host, versionId)))
      return;
    await deleteVersion(this.host, await requireVersion(this.host, versionId));
  }

  async probeEgress(envId: string): Promise<ProbeResult> {
    const { probeEgress } = await verbs();
    return probeEgress(this.host.docker, this.host.canary, await requireEnvironment(this.host, envId));
  }

  async logs(envId: string, service?: string, tail = 200): Promise<{ stdout: string; stderr: string }> {
    const rec = await requireEnvironment(this.host, envId);
    const name = service ?? rec.plan.agent.service;
    const id = rec.containers[name];
    if (!id) throw new DenvError("not_found", `environment ${envId} has no service '${name}'`);
    const logs = await this.host.docker.containers.logs(id, tail);
    return { stdout: logs.stdout.toString("utf8"), stderr: logs.stderr.toString("utf8") };
  }

  // ---------------------------------------------------------------- what the host holds

  async list(): Promise<{ environments: HostEnvironment[]; versions: VersionInfo[] }> {
    const envs = await this.host.records.environments();
    const versions = await this.host.records.versions();
    return {
      environments: envs.map(hostEnvironment),
      versions: versions.sort((a, b) => a.number - b.number).map(versionInfo),
    };
  }

  async has(envId: string): Promise<boolean> {
    return (await this.host.records.getEnvironment(envId)) !== undefined;
  }

  async environment(envId: string): Promise<HostEnvironment> {
    return hostEnvironment(await requireEnvironment(this.host, envId));
  }

  async version(versionId: string): Promise<VersionInfo> {
    return versionInfo(await requireVersion(this.host, versionId));
  }

  /** Removes everything carrying this host's id that no record owns. */
  gc(): Promise<{ removed: string[] }> {
    return collectGarbage(this.host);
  }

  private locked<T>(envId: string, fn: (rec: Awaited<ReturnType<typeof requireEnvironment>>) => Promise<T>) {
    return this.host.locks.with(envId, async () => fn(await requireEnvironment(this.host, envId)));
  }
}
