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
import { SandboxRuntime } from "../sandbox-runtime.js";
import { checkPlan, PROVIDER } from "./check-plan.js";
import { gc as collectGarbage, releaseAll, settle as settleCommand } from "./e2b-cleanup.js";
import { connectSandbox, type E2bHost, provider, renewTimeouts } from "./e2b-host.js";
import { captureVersion, pauseEnvironment, resumeEnvironment } from "./e2b-lifecycle.js";
import {
  createEnvironment,
  createVerifierSandbox,
  type EnvironmentBase,
  probeEgress,
} from "./e2b-materialize.js";
import { type E2bEnvironmentRecord, E2bRecords, type E2bVersionRecord } from "./e2b-records.js";
import { hostEnvironment, hostVersion } from "./e2b-reports.js";
import { type E2bConnection, type E2bSandbox, loadE2b, sdkOptions } from "./e2b-sdk.js";
import type { EgressCanary } from "./egress-probe.js";
import { execInSandbox } from "./sandbox-exec.js";
import { agentPrincipal, type SandboxUser } from "./sandbox-user.js";

export interface E2bRuntimeOptions {
  hostId: string;
  /** denvd's state folder; the runtime keeps its records under `<stateDir>/e2b/`. */
  stateDir: string;
  /** The user's E2B API key and where the SDK reaches E2B. */
  connection: E2bConnection;
  /** Listeners the egress probe connects to from inside each sandbox (protection 5). */
  egressCanaries: readonly EgressCanary[];
  /** E2B kills a sandbox when its timeout passes: each is created with this one and kept alive. */
  sandboxTimeoutMs?: number;
  /** How often every recorded sandbox's timeout is renewed (default: a third of the timeout). */
  keepAliveMs?: number;
  log?: (line: string) => void;
}

/** One hour: the longest sandbox timeout every E2B plan allows; renewed while the record lives. */
const DEFAULT_SANDBOX_TIMEOUT_MS = 3_600_000;

const newId = () => randomBytes(4).toString("hex");

/**
 * What the verbs use beyond the SDK, loaded at the first verb: an idle bridge holds neither the
 * compose validator nor tar-stream (packages/denvd/README.md, "Memory"), as Runtime's verbs.ts.
 */
const verbs = async () => ({
  ...(await import("../../project-loader.js")),
  ...(await import("../../runtime/ensure-image.js")),
  ...(await import("./build-template.js")),
  ...(await import("./e2b-verify.js")),
  ...(await import("./sandbox-files.js")),
});

/**
 * A denvd host's runtime when the host is a bridge to E2B (https://e2b.dev): each environment is
 * one E2B sandbox from a template built of its one service, a version is an E2B snapshot of that
 * sandbox, and a fork a new sandbox from the snapshot, all through the official `e2b` SDK. What
 * E2B cannot do is refused in one line (ProviderMessages), never dropped: several services,
 * volumes, denv's own sandboxes, a verifier with an image of its own, logs, and the compose keys
 * check-plan.ts names; stop and start are E2B's pause and resume (e2b-lifecycle.ts). The
 * protections as they apply here: the agent is never root (decided on the resolved uid, and no
 * sudo or su without a password, nor the verifier's uid where it grades in the agent's
 * sandbox); the verifier runs after the agent's processes were killed, on a fork, as its own uid
 * in the fork's sandbox (e2b-verify.ts); uploads and downloads pass denvd's special-file check;
 * egress is E2B's network policy (`allowInternetAccess: false`), probed from inside the sandbox
 * against the configured canaries. Memory and cpu caps are the template's; E2B has no pid cap nor no-new-privileges of
 * denv's. `release` gives back everything the host made at E2B when its target is removed.
 */
export class E2bRuntime
  extends SandboxRuntime<E2bEnvironmentRecord, E2bVersionRecord>
  implements HostRuntime
{
  protected readonly provider = PROVIDER;
  readonly engine = undefined;
  private readonly locks = new Locks();
  private readonly sandboxes = new Map<string, E2bSandbox>();
  private keepAlive: NodeJS.Timeout | undefined;

  private constructor(
    private readonly o: E2bRuntimeOptions,
    private readonly host: E2bHost,
  ) {
    super();
  }

  get hostId(): string {
    return this.host.hostId;
  }
  get stateDir(): string {
    return this.o.stateDir;
  }

  /** Opens the records and starts renewing the recorded sandboxes' timeouts. */
  static async open(o: E2bRuntimeOptions): Promise<E2bRuntime> {
    const timeoutMs = o.sandboxTimeoutMs ?? DEFAULT_SANDBOX_TIMEOUT_MS;
    const rt = new E2bRuntime(o, {
      hostId: o.hostId,
      api: sdkOptions(o.connection),
      records: await E2bRecords.open(o.stateDir),
      inFlight: new Set(),
      timeoutMs,
      canaries: o.egressCanaries,
      log: (line) => o.log?.(`e2b: ${line}`),
    });
    rt.keepAlive = setInterval(
      () => void renewTimeouts(rt.host).catch((e: unknown) => rt.host.log(`keep-alive: ${String(e)}`)),
      o.keepAliveMs ?? Math.floor(timeoutMs / 3),
    );
    rt.keepAlive.unref();
    return rt;
  }

  async close(): Promise<void> {
    clearInterval(this.keepAlive);
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
    const { buildTemplates, deployPlan, tarDirectory } = await verbs();
    phase.start("validate");
    const plan = deployPlan(project, projectDir, req);
    const service = checkPlan(plan);
    phase.end("validate", { services: [service.name], agent: plan.agent.service });
    return this.locks.with(id, async () => {
      await this.refuseExisting(id, HostRefusals.environmentExists(id));
      phase.start("build");
      const { template, verifierTemplate } = await provider(() =>
        buildTemplates(this.o.connection, this.host.records, {
          hostId: this.hostId,
          project,
          projectDir,
          service,
          verifier: plan.verifier,
          onLog: (line) => this.host.log(`${id} build: ${line}`),
        }),
      );
      phase.end("build", {
        digests: {
          [service.name]: template.alias,
          ...(verifierTemplate ? { verifier: verifierTemplate } : {}),
        },
      });
      // Named after the command, which gc leaves alone while it runs.
      let testsTar: string | undefined;
      this.host.inFlight.add(command);
      try {
        if (plan.verifier?.tests) {
          testsTar = join(this.host.records.testsDir, `${command}.tar`);
          await tarDirectory(join(projectDir, plan.verifier.tests), testsTar);
        }
        return await this.materialize(
          { id, project, name, plan, command, image: template.alias, testsTar, verifierTemplate },
          template.alias,
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
          "an E2B sandbox runs from its creation",
        ),
      );
    }
    const version = await this.requireVersion(versionId);
    const name = checkName("environment", opts.name ?? `fork-${newId()}`);
    const id = `${version.project}/${name}`;
    const command = opts.command ?? `fork-${newId()}`;
    return this.locks.with(id, async () => {
      await this.refuseExisting(id, HostRefusals.forkExists(id));
      return this.materialize(
        {
          id,
          project: version.project,
          name,
          plan: version.plan,
          command,
          image: version.id,
          testsTar: version.testsTar,
          verifierTemplate: version.verifierTemplate,
        },
        version.snapshotId,
        version,
        opts.onPhase ?? noPhases,
      );
    });
  }

  /** The environment's sandbox made and recorded (e2b-materialize.ts), and kept connected. */
  private async materialize(
    base: EnvironmentBase,
    from: string,
    version: E2bVersionRecord | undefined,
    phase: PhaseListener,
  ): Promise<HostEnvironment> {
    const { rec, sbx } = await createEnvironment(this.host, base, from, version, phase);
    this.sandboxes.set(rec.id, sbx);
    return hostEnvironment(this.hostId, rec);
  }

  // ---------------------------------------------------------------- exec and files

  async exec(envId: string, o: ExecOptions): Promise<RawExecResult> {
    const { rec, sbx } = await this.open(envId);
    const ask = { service: o.service, user: o.user };
    const user = await agentPrincipal(sbx, rec.plan, ask, this.agentOf(rec), rec.verifierUid);
    return provider(() => execInSandbox(sbx, user, o.cwd ?? rec.agent.workdir, o));
  }

  async putFiles(envId: string, dir: string, archive: Readable | Buffer, t: FilesTarget = {}) {
    const { rec, sbx } = await this.open(envId);
    const user = await agentPrincipal(sbx, rec.plan, t, this.agentOf(rec), rec.verifierUid);
    const { putSandboxFiles } = await verbs();
    return provider(() => putSandboxFiles(sbx, user, dir, archive));
  }

  async getFiles(envId: string, path: string, t: FilesTarget = {}): Promise<Readable> {
    const { rec, sbx } = await this.open(envId);
    const user = await agentPrincipal(sbx, rec.plan, t, this.agentOf(rec), rec.verifierUid);
    const { getSandboxFiles } = await verbs();
    return provider(() => getSandboxFiles(sbx, user, path));
  }

  // ---------------------------------------------------------------- versions

  /** An E2B snapshot of the environment's sandbox, recorded as PROJECT@vN. */
  async snapshot(
    envId: string,
    opts: { command?: string; onPhase?: PhaseListener; number?: number | undefined } = {},
  ): Promise<Version> {
    const phase = opts.onPhase ?? noPhases;
    const command = opts.command ?? `snapshot-${newId()}`;
    return this.locks.with(envId, async () => {
      const { rec, sbx } = await this.open(envId);
      const number = opts.number ?? (await this.host.records.nextVersionNumber(rec.project));
      const v = await captureVersion(this.host, rec, sbx, { number, command, phase });
      return hostVersion(this.hostId, v);
    });
  }

  async deleteVersion(versionId: string): Promise<void> {
    const { Sandbox } = await loadE2b();
    const v = await this.requireVersion(versionId);
    await provider(() => Sandbox.deleteSnapshot(v.snapshotId, this.host.api));
    await this.host.records.deleteVersion(v.id);
  }

  // ---------------------------------------------------------------- lifecycle

  /** Kills the environment's sandbox and forgets it. Versions stay. */
  async destroy(envId: string, opts: { onPhase?: PhaseListener } = {}): Promise<void> {
    const { Sandbox } = await loadE2b();
    const phase = opts.onPhase ?? noPhases;
    await this.locks.with(envId, async () => {
      const rec = await this.requireEnvironment(envId);
      phase.start("destroy");
      // false: E2B no longer has it (it timed out); the record goes all the same.
      await provider(() => Sandbox.kill(rec.sandboxId, this.host.api));
      this.sandboxes.delete(envId);
      await this.host.records.deleteEnvironment(envId);
      phase.end("destroy", { services: [rec.plan.agent.service], volumes: [] });
    });
  }

  async probeEgress(envId: string): Promise<EgressProbe> {
    const { rec, sbx } = await this.open(envId);
    return probeEgress(this.host, sbx, this.agentOf(rec), rec.plan.agent.service);
  }

  /** Grades the environment on a fork, the verifier in its sandbox or one of its own (e2b-verify.ts). */
  async verify(envId: string, opts: VerifyOptions = {}): Promise<HostVerifyResult> {
    const { verifyOnE2b } = await verbs();
    return verifyOnE2b(
      {
        environment: (id) => this.open(id),
        snapshot: (id, o) => this.snapshot(id, o),
        version: (id) => this.version(id),
        fork: (id, o) => this.fork(id, o),
        destroy: (id) => this.destroy(id),
        verifierSandbox: async (id, command) =>
          createVerifierSandbox(this.host, await this.requireEnvironment(id), command),
      },
      envId,
      opts,
    );
  }
  /** E2B's pause of the environment's sandbox (e2b-lifecycle.ts); a stopped one stays so. */
  async stop(envId: string, opts: { onPhase?: PhaseListener } = {}): Promise<HostEnvironment> {
    return this.locks.with(envId, async () => {
      let rec = await this.requireEnvironment(envId);
      if (!rec.paused) {
        rec = await pauseEnvironment(this.host, rec, (await this.open(envId)).sbx, opts.onPhase ?? noPhases);
        this.sandboxes.delete(envId);
      }
      return hostEnvironment(this.hostId, rec);
    });
  }
  /** The sandbox resumed and probed (e2b-lifecycle.ts); a running one stays so. */
  async start(envId: string, opts: { onPhase?: PhaseListener } = {}): Promise<HostEnvironment> {
    return this.locks.with(envId, async () => {
      let rec = await this.requireEnvironment(envId);
      if (rec.paused) {
        const resumed = await resumeEnvironment(this.host, rec, opts.onPhase ?? noPhases);
        rec = resumed.rec;
        this.sandboxes.set(envId, resumed.sbx);
      }
      return hostEnvironment(this.hostId, rec);
    });
  }
  // ---------------------------------------------------------------- what the host holds

  protected get records(): E2bRecords {
    return this.host.records;
  }

  protected reportEnvironment(rec: E2bEnvironmentRecord): HostEnvironment {
    return hostEnvironment(this.hostId, rec);
  }

  protected reportVersion(v: E2bVersionRecord): Version {
    return hostVersion(this.hostId, v);
  }

  /**
   * Everything this host holds at E2B removed, for `denvd release` when its target goes: every
   * environment's sandbox, every version's snapshot, what gc finds, and the templates it built.
   */
  async release(): Promise<{ removed: string[] }> {
    return releaseAll(this.host, {
      destroy: (id) => this.destroy(id),
      deleteVersion: (id) => this.deleteVersion(id),
    });
  }

  /** Removes what carries this host's id and no record owns (e2b-cleanup.ts). */
  gc(): Promise<{ removed: string[] }> {
    return collectGarbage(this.host);
  }

  /** What a crash left of a command (e2b-cleanup.ts). */
  settle(command: Parameters<HostRuntime["settle"]>[0]): Promise<Settled> {
    return settleCommand(this.host, command);
  }

  // ---------------------------------------------------------------- helpers

  private agentOf(rec: E2bEnvironmentRecord): SandboxUser {
    return { name: rec.agentName, uid: rec.agentUid };
  }

  /** The environment's record and its sandbox, connected once and kept; a stopped one refused. */
  private async open(envId: string): Promise<{ rec: E2bEnvironmentRecord; sbx: E2bSandbox }> {
    const rec = await this.requireEnvironment(envId);
    // A connect would resume it: a stopped environment starts only when asked to.
    if (rec.paused) throw new DenvError("conflict", ProviderMessages.paused(PROVIDER, rec.id));
    let sbx = this.sandboxes.get(envId);
    if (!sbx || sbx.sandboxId !== rec.sandboxId) {
      sbx = await connectSandbox(this.host, rec.sandboxId);
      this.sandboxes.set(envId, sbx);
    }
    return { rec, sbx };
  }
}
