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
import type { ModalClient, Sandbox } from "modal";
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
import { principalFor } from "../e2b/sandbox-user.js";
import { SandboxRuntime } from "../sandbox-runtime.js";
import {
  gc as collectGarbage,
  deleteImage,
  releaseAll,
  settle as settleCommand,
  terminate,
} from "./modal-cleanup.js";
import { type ModalUser, modalUser } from "./modal-exec.js";
import { type ModalBridge, modal, PROVIDER } from "./modal-host.js";
import {
  createEnvironment,
  type EnvironmentBase,
  MAX_TIMEOUT_MS,
  probeSandbox,
  runAs,
} from "./modal-materialize.js";
import { type ModalEnvironmentRecord, ModalRecords, type ModalVersionRecord } from "./modal-records.js";
import { hostEnvironment, hostVersion } from "./modal-reports.js";

export interface ModalRuntimeOptions {
  hostId: string;
  /** denvd's state folder; the runtime keeps its records under `<stateDir>/modal/`. */
  stateDir: string;
  /**
   * The user's Modal token, and Modal's API (the SDK's MODAL_SERVER_URL; default Modal's own). The
   * SDK reads its server URL from its environment only, so `serverUrl` is set there: a bridge is a
   * process of its own.
   */
  connection: { tokenId: string; tokenSecret: string; serverUrl?: string };
  /** Listeners the egress probe connects to from inside each sandbox (protection 5). */
  egressCanaries: readonly EgressCanary[];
  /** Each sandbox's lifetime in ms (at most 24 hours, the default): Modal ends it then. */
  sandboxTimeoutMs?: number;
  log?: (line: string) => void;
}

const newId = () => randomBytes(4).toString("hex");

/** What the verbs use beyond the SDK, loaded at the first verb (as the other providers' runtimes). */
const verbs = async () => ({
  ...(await import("../../project-loader.js")),
  ...(await import("../../runtime/ensure-image.js")),
  ...(await import("./modal-images.js")),
  ...(await import("./modal-exec.js")),
  ...(await import("./modal-files.js")),
  ...(await import("./modal-versions.js")),
  ...(await import("./modal-verify.js")),
});

/**
 * A denvd host's runtime when the host is a bridge to Modal's sandboxes (https://modal.com/docs,
 * through the official `modal` SDK): each environment is one sandbox, in the app `denv-<host>`, of
 * an image Modal's image API builds from its one service's Dockerfile (modal-images.ts); a version
 * is Modal's filesystem snapshot of that sandbox (an image), a fork a new sandbox of it with its
 * service started anew (a snapshot holds no processes). Modal's exec takes no user: every command
 * runs as the sandbox's root and becomes the user asked through /usr/bin/setpriv (modal-exec.ts),
 * the agent's resolved through the passwd. What Modal cannot do is refused in one line
 * (ProviderMessages): several services, volumes, denv's own sandboxes, a verifier that reads only
 * files, logs, stop and start (no pause), and the keys check-plan.ts names. The protections as
 * they apply here: the agent is never root (decided on the resolved uid; no sudo or su without a
 * password, no system directory it can write, nor the verifier's uid); the verifier runs after the
 * agent's processes were killed, on a fork, as its own uid (modal-verify.ts); uploads and
 * downloads pass denvd's special-file check; egress is Modal's `blockNetwork`, probed from inside
 * against the configured canaries. A sandbox lives at most `sandboxTimeoutMs`.
 */
export class ModalRuntime
  extends SandboxRuntime<ModalEnvironmentRecord, ModalVersionRecord>
  implements HostRuntime
{
  protected readonly provider = PROVIDER;
  readonly engine = undefined;
  private readonly locks = new Locks();

  private constructor(
    private readonly host: ModalBridge,
    readonly stateDir: string,
  ) {
    super();
  }

  get hostId(): string {
    return this.host.hostId;
  }

  static async open(o: ModalRuntimeOptions): Promise<ModalRuntime> {
    const timeoutMs = o.sandboxTimeoutMs ?? MAX_TIMEOUT_MS;
    if (!Number.isInteger(timeoutMs) || timeoutMs < 1000 || timeoutMs > MAX_TIMEOUT_MS) {
      throw new DenvError(
        "invalid_request",
        `the Modal sandbox timeout must be 1 s to ${MAX_TIMEOUT_MS / 3600_000} hours, not ${timeoutMs} ms`,
      );
    }
    if (o.connection.serverUrl) process.env.MODAL_SERVER_URL = o.connection.serverUrl;
    const { ModalClient } = await import("modal");
    const client: ModalClient = new ModalClient({
      tokenId: o.connection.tokenId,
      tokenSecret: o.connection.tokenSecret,
    });
    try {
      const app = await modal(() => client.apps.fromName(`denv-${o.hostId}`, { createIfMissing: true }));
      const handles = new Map<string, Sandbox>();
      const host: ModalBridge = {
        hostId: o.hostId,
        client,
        app,
        records: await ModalRecords.open(o.stateDir),
        inFlight: new Set(),
        canaries: o.egressCanaries,
        timeoutMs,
        log: (line) => o.log?.(`modal: ${line}`),
        async sandbox(id) {
          let sb = handles.get(id);
          if (!sb) {
            sb = await client.sandboxes.fromId(id);
            handles.set(id, sb);
          }
          return sb;
        },
        forget: (id) => void handles.delete(id),
      };
      return new ModalRuntime(host, o.stateDir);
    } catch (e) {
      client.close();
      throw e;
    }
  }

  async close(): Promise<void> {
    this.host.client.close();
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
    const { deployPlan, buildModalImage, tarDirectory } = await verbs();
    phase.start("validate");
    const plan = deployPlan(project, projectDir, req);
    const service = checkPlan(plan, PROVIDER);
    if (plan.verifier?.services === false) {
      throw new DenvError(
        "invalid_request",
        ProviderMessages.lacks(
          PROVIDER,
          "a verifier sandbox of its own",
          "x-denv.verifier.services: false needs (a verifier on Modal grades in the fork's sandbox, as its own uid: drop services: false)",
        ),
      );
    }
    phase.end("validate", { services: [service.name], agent: plan.agent.service });
    return this.locks.with(id, async () => {
      await this.refuseExisting(id, HostRefusals.environmentExists(id));
      phase.start("build");
      const image = await buildModalImage(this.host.client, this.host.app, { projectDir, service });
      phase.end("build", { digests: { [service.name]: image.imageId } });
      let testsTar: string | undefined;
      this.host.inFlight.add(command);
      try {
        if (plan.verifier?.tests) {
          // Named after the command, which gc leaves alone while it runs.
          testsTar = join(this.host.records.testsDir, `${command}.tar`);
          await tarDirectory(join(projectDir, plan.verifier.tests), testsTar);
        }
        return await this.materialize(
          { id, project, name, plan, command, imageId: image.imageId, imageUser: image.user },
          { testsTar },
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
          "a Modal sandbox runs from its creation",
        ),
      );
    }
    const v = await this.requireVersion(versionId);
    const name = checkName("environment", opts.name ?? `fork-${newId()}`);
    const id = `${v.project}/${name}`;
    const command = opts.command ?? `fork-${newId()}`;
    return this.locks.with(id, async () => {
      await this.refuseExisting(id, HostRefusals.forkExists(id));
      this.host.inFlight.add(command);
      try {
        return await this.materialize(
          { id, project: v.project, name, plan: v.plan, command, imageId: v.imageId, imageUser: v.imageUser },
          { testsTar: v.testsTar, version: v.id },
          opts.onPhase ?? noPhases,
        );
      } finally {
        this.host.inFlight.delete(command);
      }
    });
  }

  /** The environment's sandbox made ready (modal-materialize.ts), then recorded; a failed record terminates it. */
  private async materialize(
    base: EnvironmentBase,
    from: { testsTar: string | undefined; version?: string },
    phase: PhaseListener,
  ): Promise<HostEnvironment> {
    const made = await modal(() => createEnvironment(this.host, base, from.version, phase));
    const rec: ModalEnvironmentRecord = {
      id: base.id,
      project: base.project,
      name: base.name,
      sandboxId: made.sandbox.sandboxId,
      imageId: base.imageId,
      ...(base.imageUser !== undefined ? { imageUser: base.imageUser } : {}),
      plan: base.plan,
      agent: base.plan.agent,
      agentUser: made.agent,
      ...(made.verifierUid !== undefined ? { verifierUid: made.verifierUid } : {}),
      networkAccess: base.plan.egress === "allow",
      baseline: made.baseline,
      probe: made.probe,
      timings: made.timings,
      command: base.command,
      ...(from.version ? { parentVersion: from.version } : {}),
      ...(from.testsTar ? { testsTar: from.testsTar } : {}),
      createdAt: new Date().toISOString(),
    };
    try {
      await this.host.records.putEnvironment(rec);
    } catch (err) {
      await terminate(this.host, rec.sandboxId).catch(() => undefined);
      throw err;
    }
    return hostEnvironment(this.hostId, rec);
  }

  // ---------------------------------------------------------------- exec and files

  async exec(envId: string, o: ExecOptions): Promise<RawExecResult> {
    const { sb, user, rec } = await this.principal(envId, o);
    const { execInModal } = await verbs();
    return modal(() => execInModal(sb, user, o.cwd ?? rec.agent.workdir, o));
  }

  async putFiles(envId: string, dir: string, archive: Readable | Buffer, t: FilesTarget = {}) {
    const { sb, user } = await this.principal(envId, t);
    const { putModalFiles } = await verbs();
    return modal(() => putModalFiles(sb, user, dir, archive));
  }

  async getFiles(envId: string, path: string, t: FilesTarget = {}): Promise<Readable> {
    const { sb, user } = await this.principal(envId, t);
    const { getModalFiles } = await verbs();
    return modal(() => getModalFiles(sb, user, path));
  }

  // ---------------------------------------------------------------- versions

  /** Modal's filesystem snapshot of the environment's sandbox (an image), recorded as PROJECT@vN. */
  async snapshot(
    envId: string,
    opts: { command?: string; onPhase?: PhaseListener; number?: number | undefined } = {},
  ): Promise<Version> {
    const phase = opts.onPhase ?? noPhases;
    const command = opts.command ?? `snapshot-${newId()}`;
    const { captureVersion } = await verbs();
    return this.locks.with(envId, async () => {
      const rec = await this.requireEnvironment(envId);
      const number = opts.number ?? (await this.host.records.nextVersionNumber(rec.project));
      phase.start("capture layers");
      this.host.inFlight.add(command);
      try {
        const v = await captureVersion(this.host.records, await this.host.sandbox(rec.sandboxId), rec, {
          number,
          command,
        });
        phase.end("capture layers", { committed: [rec.plan.agent.service] });
        return hostVersion(this.hostId, v);
      } finally {
        this.host.inFlight.delete(command);
      }
    });
  }

  /** The version's snapshot image deleted at Modal, then its record (forks made of it keep running). */
  async deleteVersion(versionId: string): Promise<void> {
    const v = await this.requireVersion(versionId);
    await deleteImage(this.host, v.imageId);
    await this.host.records.deleteVersion(v.id);
  }

  // ---------------------------------------------------------------- lifecycle

  /** Terminates the environment's sandbox and forgets it (one Modal no longer has too). Versions stay. */
  async destroy(envId: string, opts: { onPhase?: PhaseListener } = {}): Promise<void> {
    const phase = opts.onPhase ?? noPhases;
    await this.locks.with(envId, async () => {
      const rec = await this.requireEnvironment(envId);
      phase.start("destroy");
      await terminate(this.host, rec.sandboxId);
      await this.host.records.deleteEnvironment(envId);
      phase.end("destroy", { services: [rec.plan.agent.service], volumes: [] });
    });
  }

  /** The egress probe again, from inside the sandbox as the agent (protection 5). */
  async probeEgress(envId: string): Promise<EgressProbe> {
    const rec = await this.requireEnvironment(envId);
    const sb = await this.host.sandbox(rec.sandboxId);
    return modal(() =>
      probeSandbox(this.host, sb, runAs(sb, rec.agentUser), rec.plan.agent.service, rec.networkAccess),
    );
  }

  /** Grades the environment on a fork, the verifier in the fork's sandbox as its own uid (modal-verify.ts). */
  async verify(envId: string, opts: VerifyOptions = {}): Promise<HostVerifyResult> {
    const { verifyOnModal } = await verbs();
    return verifyOnModal(
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

  /** Refused: Modal has no pause. */
  async stop(_envId: string): Promise<HostEnvironment> {
    this.refuseNoPause("stop");
  }

  /** Refused: Modal has no pause. */
  async start(_envId: string): Promise<HostEnvironment> {
    this.refuseNoPause("start");
  }

  // ---------------------------------------------------------------- what the host holds

  protected get records(): ModalRecords {
    return this.host.records;
  }

  protected reportEnvironment(rec: ModalEnvironmentRecord): HostEnvironment {
    return hostEnvironment(this.hostId, rec);
  }

  protected reportVersion(v: ModalVersionRecord): Version {
    return hostVersion(this.hostId, v);
  }

  /** Everything this host holds at Modal removed, for `denvd release` when its target goes (modal-cleanup.ts). */
  async release(): Promise<{ removed: string[] }> {
    return releaseAll(this.host, {
      destroy: (id) => this.destroy(id),
      deleteVersion: (id) => this.deleteVersion(id),
    });
  }

  /** Terminates what carries this host's id and no record owns (modal-cleanup.ts). */
  gc(): Promise<{ removed: string[] }> {
    return collectGarbage(this.host);
  }

  /** What a crash left of a command (modal-cleanup.ts). */
  settle(command: Parameters<HostRuntime["settle"]>[0]): Promise<Settled> {
    return settleCommand(this.host, command);
  }

  // ---------------------------------------------------------------- helpers

  /**
   * The record, its sandbox and who a call runs as: the agent, or a user asked that is neither
   * root nor the verifier (decided on the uid the sandbox's passwd resolves).
   */
  private async principal(
    envId: string,
    ask: { service?: string | undefined; user?: string | undefined },
  ): Promise<{ rec: ModalEnvironmentRecord; sb: Sandbox; user: ModalUser }> {
    const rec = await this.requireEnvironment(envId);
    const sb = await this.host.sandbox(rec.sandboxId);
    const passwd = await modal(() => sb.filesystem.readText("/etc/passwd"));
    const agent = { name: rec.agentUser.name, uid: rec.agentUser.uid };
    const user = await principalFor(async () => passwd, rec.plan, ask, agent, rec.verifierUid, PROVIDER);
    return { rec, sb, user: user.uid === rec.agentUser.uid ? rec.agentUser : modalUser(passwd, user.name) };
  }
}
