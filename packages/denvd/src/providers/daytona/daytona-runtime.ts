import { randomBytes } from "node:crypto";
import { rm } from "node:fs/promises";
import { join, resolve } from "node:path";
import type { Readable } from "node:stream";
import {
  DenvError,
  type EgressProbe,
  type HostEnvironment,
  HostRefusals,
  type HostVerifyResult,
  Protection,
  ProviderMessages,
  type Version,
} from "@denv/spec";
import { checkName } from "@denv/spec/names";
import type { RawExecResult } from "../../exec-runner.js";
import type { ExecOptions } from "../../runtime/environment-exec.js";
import type { FilesTarget } from "../../runtime/environment-files.js";
import type { HostRuntime, Settled } from "../../runtime/host-runtime.js";
import { Locks } from "../../runtime/locks.js";
import { noPhases, type PhaseListener } from "../../runtime/phase-listener.js";
import type { DeployRequest } from "../../runtime/runtime.js";
import type { VerifyOptions } from "../../runtime/verify-environment.js";
import { slug, templatePrefix } from "../e2b/build-template.js";
import { checkPlan } from "../e2b/check-plan.js";
import type { EgressCanary } from "../e2b/egress-probe.js";
import { SandboxRuntime } from "../sandbox-runtime.js";
import { gc as collectGarbage, releaseAll, settle as settleCommand } from "./daytona-cleanup.js";
import { type DaytonaHost, PROVIDER, provider } from "./daytona-host.js";
import {
  createEnvironment,
  type EnvironmentBase,
  probeEgress,
  startService,
  waitHealthy,
} from "./daytona-materialize.js";
import { checkPrincipal, checkVerifierImage } from "./daytona-principal.js";
import {
  type DaytonaEnvironmentRecord,
  DaytonaRecords,
  type DaytonaVersionRecord,
} from "./daytona-records.js";
import { hostEnvironment, hostVersion } from "./daytona-reports.js";
import { type DaytonaConnection, type DaytonaSandbox, openClient } from "./daytona-sdk.js";

export interface DaytonaRuntimeOptions {
  hostId: string;
  /** denvd's state folder; the runtime keeps its records under `<stateDir>/daytona/`. */
  stateDir: string;
  /** The user's Daytona API key and where the SDK reaches Daytona. */
  connection: DaytonaConnection;
  /** Listeners the egress probe connects to from inside each sandbox (protection 5). */
  egressCanaries: readonly EgressCanary[];
  log?: (line: string) => void;
}

const newId = () => randomBytes(4).toString("hex");

/** What the verbs use beyond the SDK, loaded at the first verb (as the E2B runtime's). */
const verbs = async () => ({
  ...(await import("../../project-loader.js")),
  ...(await import("../../runtime/ensure-image.js")),
  ...(await import("./build-snapshot.js")),
  ...(await import("./daytona-exec.js")),
  ...(await import("./daytona-files.js")),
  ...(await import("./daytona-verify.js")),
});

/**
 * A denvd host's runtime when the host is a bridge to Daytona (https://daytona.io): each
 * environment is one Daytona sandbox from a snapshot built of its one service, a version is a
 * Daytona snapshot of that sandbox's filesystem, and a fork a new sandbox from it, all through
 * the official `@daytonaio/sdk`. What Daytona cannot do is refused in one line (ProviderMessages):
 * several services, volumes, denv's own sandboxes, a verifier image of its own, logs, the compose
 * keys check-plan.ts names, a user other than the agent's. A Daytona sandbox has one OS user
 * (its toolbox takes no per-command user), so the agent's sandbox is made with the agent's user,
 * whose uid is read from the kernel and never 0 (protection 1); the verifier grades in a sandbox
 * of its own (daytona-verify.ts). Stop and start are Daytona's: every process ends at a stop.
 * Egress is Daytona's `networkBlockAll`, probed from inside against the configured canaries.
 */
export class DaytonaRuntime
  extends SandboxRuntime<DaytonaEnvironmentRecord, DaytonaVersionRecord>
  implements HostRuntime
{
  protected readonly provider = PROVIDER;
  readonly engine = undefined;
  private readonly locks = new Locks();
  private readonly sandboxes = new Map<string, DaytonaSandbox>();

  private constructor(
    private readonly host: DaytonaHost,
    readonly stateDir: string,
  ) {
    super();
  }

  get hostId(): string {
    return this.host.hostId;
  }

  static async open(o: DaytonaRuntimeOptions): Promise<DaytonaRuntime> {
    return new DaytonaRuntime(
      {
        hostId: o.hostId,
        client: await openClient(o.connection),
        records: await DaytonaRecords.open(o.stateDir),
        inFlight: new Set(),
        canaries: o.egressCanaries,
        log: (line) => o.log?.(`daytona: ${line}`),
      },
      o.stateDir,
    );
  }

  async close(): Promise<void> {
    this.sandboxes.clear();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  // ---------------------------------------------------------------- deploy and fork

  async deploy(req: DeployRequest): Promise<HostEnvironment> {
    const project = checkName("project", req.project);
    const name = checkName("environment", req.environment ?? "alpha");
    const id = `${project}/${name}`;
    const command = req.command ?? `deploy-${newId()}`;
    const phase = req.onPhase ?? noPhases;
    const projectDir = resolve(req.projectDir);
    const { buildSnapshot, deployPlan, tarDirectory } = await verbs();
    phase.start("validate");
    const plan = deployPlan(project, projectDir, req);
    const service = checkPlan(plan, PROVIDER);
    checkVerifierImage(plan);
    phase.end("validate", { services: [service.name], agent: plan.agent.service });
    return this.locks.with(id, async () => {
      if (await this.host.records.getEnvironment(id)) {
        throw new DenvError("conflict", HostRefusals.environmentExists(id));
      }
      phase.start("build");
      const built = await buildSnapshot(this.host, {
        project,
        projectDir,
        service,
        onLog: (line) => this.host.log(`${id} build: ${line}`),
      });
      phase.end("build", { digests: { [service.name]: built.name } });
      let testsTar: string | undefined;
      this.host.inFlight.add(command);
      try {
        if (plan.verifier?.tests) {
          testsTar = join(this.host.records.testsDir, `${command}.tar`);
          await tarDirectory(join(projectDir, plan.verifier.tests), testsTar);
        }
        return await this.materialize(
          { id, project, name, plan, command, image: built.name, testsTar },
          built.name,
          undefined,
          phase,
        );
      } catch (err) {
        if (testsTar) await rm(testsTar, { force: true });
        throw err;
      } finally {
        this.host.inFlight.delete(command);
      }
    });
  }

  async fork(
    versionId: string,
    opts: { name?: string; command?: string; onPhase?: PhaseListener; start?: boolean } = {},
  ): Promise<HostEnvironment> {
    if (opts.start === false) {
      throw new DenvError(
        "invalid_request",
        ProviderMessages.unsupportedOption(
          PROVIDER,
          "a fork without starting (start: false)",
          "a Daytona sandbox starts when it is created",
        ),
      );
    }
    const v = await this.requireVersion(versionId);
    const name = checkName("environment", opts.name ?? `fork-${newId()}`);
    const id = `${v.project}/${name}`;
    return this.locks.with(id, async () => {
      if (await this.host.records.getEnvironment(id)) {
        throw new DenvError("conflict", HostRefusals.forkExists(id));
      }
      return this.materialize(
        {
          id,
          project: v.project,
          name,
          plan: v.plan,
          command: opts.command ?? `fork-${newId()}`,
          image: v.id,
          testsTar: v.testsTar,
        },
        v.snapshot,
        v,
        opts.onPhase ?? noPhases,
      );
    });
  }

  private async materialize(
    base: EnvironmentBase,
    snapshot: string,
    version: DaytonaVersionRecord | undefined,
    phase: PhaseListener,
  ): Promise<HostEnvironment> {
    const { rec, sbx } = await createEnvironment(this.host, base, snapshot, version, phase);
    this.sandboxes.set(rec.id, sbx);
    return hostEnvironment(this.hostId, rec);
  }

  // ---------------------------------------------------------------- exec and files

  async exec(envId: string, o: ExecOptions): Promise<RawExecResult> {
    const { rec, sbx } = await this.open(envId);
    await checkPrincipal(rec, sbx, o);
    const { execInDaytona } = await verbs();
    return provider(() => execInDaytona(sbx, o.cwd ?? rec.agent.workdir, o));
  }

  async putFiles(envId: string, dir: string, archive: Readable | Buffer, t: FilesTarget = {}) {
    const { rec, sbx } = await this.open(envId);
    await checkPrincipal(rec, sbx, t);
    const { putDaytonaFiles } = await verbs();
    return provider(() => putDaytonaFiles(sbx, dir, archive));
  }

  async getFiles(envId: string, path: string, t: FilesTarget = {}): Promise<Readable> {
    const { rec, sbx } = await this.open(envId);
    await checkPrincipal(rec, sbx, t);
    const { getDaytonaFiles } = await verbs();
    return provider(() => getDaytonaFiles(sbx, path));
  }

  // ---------------------------------------------------------------- versions

  /** A Daytona snapshot of the environment's sandbox (its filesystem), recorded as PROJECT@vN. */
  async snapshot(
    envId: string,
    opts: { command?: string; onPhase?: PhaseListener; number?: number | undefined } = {},
  ): Promise<Version> {
    const phase = opts.onPhase ?? noPhases;
    const command = opts.command ?? `snapshot-${newId()}`;
    return this.locks.with(envId, async () => {
      const rec = await this.requireEnvironment(envId);
      const sbx = await this.sandbox(rec);
      const number = opts.number ?? (await this.host.records.nextVersionNumber(rec.project));
      const id = `${rec.project}@v${number}`;
      if (await this.host.records.getVersion(id)) throw new DenvError("conflict", `version ${id} exists`);
      const started = Date.now();
      phase.start("capture layers");
      // Named so that gc finds a snapshot a crash left unrecorded.
      const name = `${templatePrefix(this.hostId)}${slug(rec.project, 24)}-v${number}-${newId()}`;
      await provider(() => sbx.createSnapshot(name));
      const took = Date.now() - started;
      phase.end("capture layers", { committed: [rec.plan.agent.service] });
      const v: DaytonaVersionRecord = {
        id,
        project: rec.project,
        number,
        snapshot: name,
        sourceEnvironment: rec.id,
        ...(rec.parentVersion ? { parentVersion: rec.parentVersion } : {}),
        plan: rec.plan,
        agent: rec.agent,
        agentUser: rec.agentUser,
        agentUid: rec.agentUid,
        networkBlockAll: rec.networkBlockAll,
        command,
        ...(rec.testsTar ? { testsTar: rec.testsTar } : {}),
        timings: { snapshot_ms: took, total_ms: Date.now() - started },
        createdAt: new Date(started).toISOString(),
      };
      await this.host.records.putVersion(v);
      return hostVersion(this.hostId, v);
    });
  }

  async deleteVersion(versionId: string): Promise<void> {
    const v = await this.requireVersion(versionId);
    await provider(() => this.host.client.snapshot.delete(v.snapshot)).catch((e: unknown) => {
      // Already gone at Daytona is what was asked.
      if (!(e instanceof DenvError && e.code === "not_found")) throw e;
    });
    await this.host.records.deleteVersion(v.id);
  }

  // ---------------------------------------------------------------- lifecycle

  /** Deletes the environment's sandbox and forgets it. Versions stay. */
  async destroy(envId: string, opts: { onPhase?: PhaseListener } = {}): Promise<void> {
    const phase = opts.onPhase ?? noPhases;
    await this.locks.with(envId, async () => {
      const rec = await this.requireEnvironment(envId);
      phase.start("destroy");
      await provider(async () => (await this.host.client.get(rec.sandboxId)).delete()).catch((e: unknown) => {
        // Daytona no longer has it: the record goes all the same.
        if (!(e instanceof DenvError && e.code === "not_found")) throw e;
      });
      this.sandboxes.delete(envId);
      await this.host.records.deleteEnvironment(envId);
      phase.end("destroy", { services: [rec.plan.agent.service], volumes: [] });
    });
  }

  async probeEgress(envId: string): Promise<EgressProbe> {
    const { rec, sbx } = await this.open(envId);
    return probeEgress(this.host, sbx, rec.plan.agent.service);
  }

  /** Grades the environment: its sandbox stopped, snapshotted, the verifier in a sandbox of its own (daytona-verify.ts). */
  async verify(envId: string, opts: VerifyOptions = {}): Promise<HostVerifyResult> {
    const { verifyOnDaytona } = await verbs();
    return verifyOnDaytona(
      {
        host: this.host,
        environment: (id) => this.open(id),
        stop: (id) => this.stop(id),
        start: (id) => this.start(id),
        snapshot: (id, o) => this.snapshot(id, o),
        version: (id) => this.version(id),
        versionRecord: (id) => this.requireVersion(id),
      },
      envId,
      opts,
    );
  }

  /** Daytona's stop of the environment's sandbox: every process in it ends, its filesystem stays. */
  async stop(envId: string, opts: { onPhase?: PhaseListener } = {}): Promise<HostEnvironment> {
    return this.locks.with(envId, async () => {
      const rec = await this.requireEnvironment(envId);
      if (rec.stopped) return hostEnvironment(this.hostId, rec);
      const phase = opts.onPhase ?? noPhases;
      phase.start("stop");
      await provider(async () => (await this.sandbox(rec)).stop());
      const stopped = { ...rec, stopped: true };
      await this.host.records.putEnvironment(stopped);
      phase.end("stop", { stopped: [rec.plan.agent.service] });
      return hostEnvironment(this.hostId, stopped);
    });
  }

  /** The sandbox started again, its service's command and healthcheck as after a deploy, then probed. */
  async start(envId: string, opts: { onPhase?: PhaseListener } = {}): Promise<HostEnvironment> {
    return this.locks.with(envId, async () => {
      const rec = await this.requireEnvironment(envId);
      if (!rec.stopped) return hostEnvironment(this.hostId, rec);
      const phase = opts.onPhase ?? noPhases;
      const sbx = await this.sandbox(rec);
      phase.start("start");
      await provider(() => sbx.start());
      const service = rec.plan.services[0];
      if (service) {
        await startService(sbx, service);
        await waitHealthy(sbx, service);
      }
      phase.end("start", { containers: { [rec.plan.agent.service]: rec.sandboxId } });
      let probe = rec.probe;
      if (rec.networkBlockAll) {
        phase.start("probe");
        const p = await probeEgress(this.host, sbx, rec.plan.agent.service);
        if (!p.ok)
          throw new DenvError("egress_leak", Protection.egressLeak(rec.id, p.findings[0] ?? "unknown"));
        phase.end("probe", p);
        probe = p;
      }
      const { stopped: _, ...running } = rec;
      const next = { ...running, probe };
      await this.host.records.putEnvironment(next);
      return hostEnvironment(this.hostId, next);
    });
  }

  // ---------------------------------------------------------------- what the host holds

  protected get records(): DaytonaRecords {
    return this.host.records;
  }

  protected reportEnvironment(rec: DaytonaEnvironmentRecord): HostEnvironment {
    return hostEnvironment(this.hostId, rec);
  }

  protected reportVersion(v: DaytonaVersionRecord): Version {
    return hostVersion(this.hostId, v);
  }

  /** Everything this host holds at Daytona removed, for `denvd release` when its target goes. */
  async release(): Promise<{ removed: string[] }> {
    return releaseAll(this.host, {
      destroy: (id) => this.destroy(id),
      deleteVersion: (id) => this.deleteVersion(id),
    });
  }

  gc(): Promise<{ removed: string[] }> {
    return collectGarbage(this.host);
  }

  settle(command: Parameters<HostRuntime["settle"]>[0]): Promise<Settled> {
    return settleCommand(this.host, command);
  }

  // ---------------------------------------------------------------- helpers

  /** The SDK's handle of the environment's sandbox, got once and kept. */
  private async sandbox(rec: DaytonaEnvironmentRecord): Promise<DaytonaSandbox> {
    let sbx = this.sandboxes.get(rec.id);
    if (!sbx || sbx.id !== rec.sandboxId) {
      sbx = await provider(() => this.host.client.get(rec.sandboxId));
      this.sandboxes.set(rec.id, sbx);
    }
    return sbx;
  }

  /** The record and its sandbox; a stopped environment is refused (it starts only when asked). */
  private async open(envId: string): Promise<{ rec: DaytonaEnvironmentRecord; sbx: DaytonaSandbox }> {
    const rec = await this.requireEnvironment(envId);
    if (rec.stopped) throw new DenvError("conflict", ProviderMessages.paused(PROVIDER, rec.id, "stopped"));
    return { rec, sbx: await this.sandbox(rec) };
  }
}
