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
import { checkPlan } from "../e2b/check-plan.js";
import type { EgressCanary } from "../e2b/egress-probe.js";
import { principalFor, type SandboxUser } from "../e2b/sandbox-user.js";
import { SandboxRuntime } from "../sandbox-runtime.js";
import { PrimeApi, type PrimeApiOptions } from "./prime-api.js";
import {
  gc as collectGarbage,
  deleteCheckpoint,
  deleteNetwork,
  deleteSandbox,
  releaseAll,
  settle as settleCommand,
} from "./prime-cleanup.js";
import { MAX_TIMEOUT_MINUTES, PROVIDER, type PrimeHost, provider } from "./prime-host.js";
import {
  createEnvironment,
  type EnvironmentBase,
  probeEgress,
  type SandboxSource,
} from "./prime-materialize.js";
import {
  checkpointsOf,
  type PrimeEnvironmentRecord,
  PrimeRecords,
  type PrimeVersionRecord,
  sandboxesOf,
} from "./prime-records.js";
import { hostEnvironment, hostVersion } from "./prime-reports.js";
import { dockerfileDefaults, serviceLog } from "./prime-start.js";
import { captureVersion } from "./prime-versions.js";

export interface PrimeRuntimeOptions {
  hostId: string;
  /** denvd's state folder; the runtime keeps its records under `<stateDir>/prime/`. */
  stateDir: string;
  /** The user's Prime API key and where Prime's API is (…/api/v1). */
  connection: PrimeApiOptions;
  /** Listeners the egress probe connects to from inside each sandbox (protection 5). */
  egressCanaries: readonly EgressCanary[];
  /** Each sandbox's lifetime in minutes (1 to 1440, the default): Prime deletes it then. */
  sandboxTimeoutMinutes?: number;
  log?: (line: string) => void;
}

const newId = () => randomBytes(4).toString("hex");

/** What the verbs use beyond the client, loaded at the first verb (as the E2B runtime's). */
const verbs = async () => ({
  ...(await import("../../project-loader.js")),
  ...(await import("../../runtime/ensure-image.js")),
  ...(await import("./prime-build.js")),
  ...(await import("./prime-exec.js")),
  ...(await import("./prime-files.js")),
  ...(await import("./prime-verify.js")),
});

/**
 * A denvd host's runtime when the host is a bridge to Prime Intellect's sandboxes
 * (https://docs.primeintellect.ai/sandboxes): each service of an environment is a Prime sandbox
 * from an image Prime builds of it, the sandboxes of several services members of a Prime private
 * network of the environment's (prime-network.ts); a version is a Prime checkpoint of every
 * sandbox's root filesystem (taken with their processes stopped, prime-versions.ts), a fork new
 * sandboxes restored from them (services started anew: a checkpoint holds no processes), all
 * through Prime's REST API and the sandboxes' command sessions (prime-api.ts). What Prime cannot
 * do is refused in one line (ProviderMessages): a volume two services share, denv's own
 * sandboxes, a verifier that reads only files, stop and start (Prime has no pause), and the
 * compose keys check-plan.ts names. The protections as they apply here, as on E2B: the agent is
 * never root (decided on the resolved uid, no sudo or su without a password, nor the verifier's
 * uid) and runs in the agent service's sandbox only; the verifier runs after the agent's
 * processes were killed, on a fork, as its own uid (prime-verify.ts); uploads and downloads pass
 * denvd's special-file check; egress is Prime's egress policy (an empty allowlist), probed from
 * inside against the configured canaries. A sandbox lives at most `sandboxTimeoutMinutes` (Prime
 * has no route to extend it).
 */
export class PrimeRuntime
  extends SandboxRuntime<PrimeEnvironmentRecord, PrimeVersionRecord>
  implements HostRuntime
{
  protected readonly provider = PROVIDER;
  readonly engine = undefined;
  private readonly locks = new Locks();

  private constructor(
    private readonly host: PrimeHost,
    readonly stateDir: string,
  ) {
    super();
  }

  get hostId(): string {
    return this.host.hostId;
  }

  static async open(o: PrimeRuntimeOptions): Promise<PrimeRuntime> {
    const minutes = o.sandboxTimeoutMinutes ?? MAX_TIMEOUT_MINUTES;
    if (!Number.isInteger(minutes) || minutes < 1 || minutes > MAX_TIMEOUT_MINUTES) {
      throw new DenvError(
        "invalid_request",
        `the Prime sandbox timeout must be 1 to ${MAX_TIMEOUT_MINUTES} minutes, not ${minutes}`,
      );
    }
    return new PrimeRuntime(
      {
        hostId: o.hostId,
        api: new PrimeApi(o.connection),
        records: await PrimeRecords.open(o.stateDir),
        inFlight: new Set(),
        canaries: o.egressCanaries,
        timeoutMinutes: minutes,
        log: (line) => o.log?.(`prime: ${line}`),
      },
      o.stateDir,
    );
  }

  async close(): Promise<void> {}

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
    const { deployPlan, planImages, tarDirectory } = await verbs();
    phase.start("validate");
    const plan = deployPlan(project, projectDir, req);
    checkPlan(plan, PROVIDER, {
      multiService: true,
      volumesOnDisk: true,
      imageCommands: true,
      neverStopped: true,
      ownVerifier: true,
      capDrop: true,
    });
    const imageDefaults = await dockerfileDefaults(projectDir, plan);
    if (plan.verifier?.services === false) {
      throw new DenvError(
        "invalid_request",
        ProviderMessages.lacks(
          PROVIDER,
          "a verifier sandbox of its own",
          "x-denv.verifier.services: false needs (a verifier on Prime grades in the fork's sandbox, as its own uid: drop services: false)",
        ),
      );
    }
    const names = plan.services.map((s) => s.name);
    phase.end("validate", { services: names, agent: plan.agent.service });
    return this.locks.with(id, async () => {
      await this.refuseExisting(id, HostRefusals.environmentExists(id));
      phase.start("build");
      const { digests, verifierImage } = await planImages(this.host, { project, projectDir, plan });
      phase.end("build", { digests, ...(verifierImage ? { verifier: verifierImage } : {}) });
      // Named after the command, which gc leaves alone while it runs.
      let testsTar: string | undefined;
      this.host.inFlight.add(command);
      try {
        if (plan.verifier?.tests) {
          testsTar = join(this.host.records.testsDir, `${command}.tar`);
          await tarDirectory(join(projectDir, plan.verifier.tests), testsTar);
        }
        return await this.materialize(
          {
            id,
            project,
            name,
            plan,
            command,
            image: digests[plan.agent.service] as string,
            imageDefaults,
            ...(verifierImage ? { verifierImage } : {}),
            testsTar,
          },
          Object.fromEntries(names.map((n) => [n, { dockerImage: digests[n] as string }])),
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
          "a Prime sandbox runs from its creation",
        ),
      );
    }
    const v = await this.requireVersion(versionId);
    const name = checkName("environment", opts.name ?? `fork-${newId()}`);
    const id = `${v.project}/${name}`;
    return this.locks.with(id, async () => {
      await this.refuseExisting(id, HostRefusals.forkExists(id));
      return this.materialize(
        {
          id,
          project: v.project,
          name,
          plan: v.plan,
          command: opts.command ?? `fork-${newId()}`,
          image: v.id,
          ...(v.imageDefaults ? { imageDefaults: v.imageDefaults } : {}),
          ...(v.verifierImage ? { verifierImage: v.verifierImage } : {}),
          testsTar: v.testsTar,
        },
        Object.fromEntries(
          Object.entries({ [v.plan.agent.service]: v.checkpointId, ...v.peerCheckpoints }).map(([n, c]) => [
            n,
            { checkpointId: c },
          ]),
        ),
        v,
        opts.onPhase ?? noPhases,
      );
    });
  }

  private async materialize(
    base: EnvironmentBase,
    sources: Record<string, SandboxSource>,
    version: PrimeVersionRecord | undefined,
    phase: PhaseListener,
  ): Promise<HostEnvironment> {
    const { rec } = await createEnvironment(this.host, base, sources, version, phase);
    return hostEnvironment(this.hostId, rec);
  }

  // ---------------------------------------------------------------- exec and files

  async exec(envId: string, o: ExecOptions): Promise<RawExecResult> {
    const { rec, user } = await this.principal(envId, o);
    const { execInPrime } = await verbs();
    return provider(() =>
      execInPrime(this.host.api, rec.sandboxId, user.name, o.cwd ?? rec.agent.workdir, o),
    );
  }

  async putFiles(envId: string, dir: string, archive: Readable | Buffer, t: FilesTarget = {}) {
    const { rec, user } = await this.principal(envId, t);
    const { putPrimeFiles } = await verbs();
    return provider(() => putPrimeFiles(this.host.api, rec.sandboxId, user.name, dir, archive));
  }

  async getFiles(envId: string, path: string, t: FilesTarget = {}): Promise<Readable> {
    const { rec, user } = await this.principal(envId, t);
    const { getPrimeFiles } = await verbs();
    return provider(() => getPrimeFiles(this.host.api, rec.sandboxId, user.name, path));
  }

  // ---------------------------------------------------------------- versions

  /** A Prime checkpoint of each of the environment's sandboxes (their root filesystems), recorded as PROJECT@vN. */
  async snapshot(
    envId: string,
    opts: { command?: string; onPhase?: PhaseListener; number?: number | undefined } = {},
  ): Promise<Version> {
    const phase = opts.onPhase ?? noPhases;
    const command = opts.command ?? `snapshot-${newId()}`;
    return this.locks.with(envId, async () => {
      const rec = await this.requireEnvironment(envId);
      const number = opts.number ?? (await this.host.records.nextVersionNumber(rec.project));
      phase.start("capture layers");
      const v = await captureVersion(this.host, rec, { number, command });
      phase.end("capture layers", { committed: rec.plan.services.map((svc) => svc.name) });
      return hostVersion(this.hostId, v);
    });
  }

  /**
   * The version's checkpoints deleted at Prime (or, while one is its running sandbox's newest, left
   * for gc: prime-cleanup.ts), then its record.
   */
  async deleteVersion(versionId: string): Promise<void> {
    const v = await this.requireVersion(versionId);
    for (const c of checkpointsOf(v)) await deleteCheckpoint(this.host, c);
    await this.host.records.deleteVersion(v.id);
  }

  // ---------------------------------------------------------------- lifecycle

  /** Deletes the environment's sandboxes and network, and forgets it (one Prime no longer has too). Versions stay. */
  async destroy(envId: string, opts: { onPhase?: PhaseListener } = {}): Promise<void> {
    const phase = opts.onPhase ?? noPhases;
    await this.locks.with(envId, async () => {
      const rec = await this.requireEnvironment(envId);
      phase.start("destroy");
      if (rec.networkId) await deleteNetwork(this.host, rec.networkId);
      for (const sandbox of sandboxesOf(rec)) await deleteSandbox(this.host, sandbox);
      await this.host.records.deleteEnvironment(envId);
      phase.end("destroy", { services: rec.plan.services.map((svc) => svc.name), volumes: [] });
    });
  }

  async probeEgress(envId: string): Promise<EgressProbe> {
    const rec = await this.requireEnvironment(envId);
    return probeEgress(this.host, rec.sandboxId, this.agentOf(rec), rec.plan.agent.service);
  }

  /** Grades the environment on a fork, the verifier in the fork's sandbox as its own uid (prime-verify.ts). */
  async verify(envId: string, opts: VerifyOptions = {}): Promise<HostVerifyResult> {
    const { verifyOnPrime } = await verbs();
    return verifyOnPrime(
      {
        host: this.host,
        environment: (id) => this.requireEnvironment(id),
        snapshot: (id, o) => this.snapshot(id, o),
        version: (id) => this.version(id),
        fork: (id, o) => this.fork(id, o),
        destroy: (id) => this.destroy(id),
      },
      envId,
      opts,
    );
  }

  /** What a service's start wrote (the agent service's by default), its last `tail` lines (prime-start.ts). */
  override async logs(
    envId: string,
    service?: string,
    tail = 200,
  ): Promise<{ stdout: string; stderr: string }> {
    return {
      stdout: await serviceLog(this.host, await this.requireEnvironment(envId), service, tail),
      stderr: "",
    };
  }

  /** Refused: Prime has no pause. */
  async stop(_envId: string): Promise<HostEnvironment> {
    this.refuseNoPause("stop");
  }

  /** Refused: Prime has no pause. */
  async start(_envId: string): Promise<HostEnvironment> {
    this.refuseNoPause("start");
  }

  // ---------------------------------------------------------------- what the host holds

  protected get records(): PrimeRecords {
    return this.host.records;
  }

  protected reportEnvironment(rec: PrimeEnvironmentRecord): HostEnvironment {
    return hostEnvironment(this.hostId, rec);
  }

  protected reportVersion(v: PrimeVersionRecord): Version {
    return hostVersion(this.hostId, v);
  }

  /** Everything this host holds at Prime removed, for `denvd release` when its target goes (prime-cleanup.ts). */
  async release(): Promise<{ removed: string[] }> {
    return releaseAll(this.host, {
      destroy: (id) => this.destroy(id),
      deleteVersion: (id) => this.deleteVersion(id),
    });
  }

  /** Removes what carries this host's id and no record owns (prime-cleanup.ts). */
  gc(): Promise<{ removed: string[] }> {
    return collectGarbage(this.host);
  }

  /** What a crash left of a command (prime-cleanup.ts). */
  settle(command: Parameters<HostRuntime["settle"]>[0]): Promise<Settled> {
    return settleCommand(this.host, command);
  }

  // ---------------------------------------------------------------- helpers

  private agentOf(rec: PrimeEnvironmentRecord): SandboxUser {
    return { name: rec.agentName, uid: rec.agentUid };
  }

  /** The record and who a call runs as: the agent, or a user asked that is neither root nor the verifier. */
  private async principal(
    envId: string,
    ask: { service?: string | undefined; user?: string | undefined },
  ): Promise<{ rec: PrimeEnvironmentRecord; user: SandboxUser }> {
    const rec = await this.requireEnvironment(envId);
    if (ask.service !== undefined && ask.service !== rec.plan.agent.service && rec.peers?.[ask.service]) {
      throw new DenvError(
        "forbidden",
        ProviderMessages.agentServiceOnly(PROVIDER, ask.service, rec.plan.agent.service),
      );
    }
    const passwd = async () =>
      (await provider(() => this.host.api.downloadFile(rec.sandboxId, "/etc/passwd"))).toString("utf8");
    const user = await principalFor(passwd, rec.plan, ask, this.agentOf(rec), rec.verifierUid, PROVIDER);
    return { rec, user };
  }
}
