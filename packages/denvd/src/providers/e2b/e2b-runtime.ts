import { randomBytes } from "node:crypto";
import { rm } from "node:fs/promises";
import { basename, join, resolve } from "node:path";
import type { Readable } from "node:stream";
import {
  DenvError,
  type EgressProbe,
  type HostEnvironment,
  type HostVerifyResult,
  labelsFor,
  type Plan,
  Protection,
  ProviderMessages,
  type Version,
} from "@denv/spec";
import { Labels } from "@denv/spec/labels";
import { HostRefusals } from "@denv/spec/messages";
import { checkName } from "@denv/spec/names";
import type { RawExecResult } from "../../exec-runner.js";
import type { ExecOptions } from "../../runtime/environment-exec.js";
import type { FilesTarget } from "../../runtime/environment-files.js";
import type { HostRuntime, Settled } from "../../runtime/host-runtime.js";
import { Locks } from "../../runtime/locks.js";
import { noPhases, type PhaseListener } from "../../runtime/phase-listener.js";
import type { DeployRequest } from "../../runtime/runtime.js";
import type { VerifyOptions } from "../../runtime/verify-environment.js";
import { slug, templatePrefix } from "./build-template.js";
import { checkPlan, PROVIDER } from "./check-plan.js";
import { type E2bEnvironmentRecord, E2bRecords, type E2bVersionRecord } from "./e2b-records.js";
import { type E2bConnection, type E2bSandbox, loadE2b, sdkOptions } from "./e2b-sdk.js";
import { type EgressCanary, probeSandboxEgress } from "./egress-probe.js";
import { execInSandbox } from "./sandbox-exec.js";
import { agentPrincipal, refuseRootAgent, resolveSandboxUser, type SandboxUser } from "./sandbox-user.js";

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
const METHOD = "e2b-snapshot";

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
  ...(await import("./sandbox-verify.js")),
});

/**
 * A denvd host's runtime when the host is a bridge to E2B (https://e2b.dev): each environment is
 * one E2B sandbox from a template built of its one service, a version is an E2B snapshot of that
 * sandbox, and a fork a new sandbox from the snapshot, all through the official `e2b` SDK. What
 * E2B cannot do is refused in one line (ProviderMessages), never dropped: several services,
 * volumes, denv's own sandboxes, verify, stop/start, logs, and the compose keys check-plan.ts
 * names. The protections as they apply here: the agent is never root (decided on the resolved
 * uid, as denvd's Docker runtime decides it); uploads and downloads pass denvd's special-file
 * check; egress is E2B's network policy (`allowInternetAccess: false`), probed from inside the
 * sandbox against the configured canaries. Memory and cpu caps are the template's; E2B has no pid
 * cap nor no-new-privileges of denv's.
 */
export class E2bRuntime implements HostRuntime {
  readonly engine = undefined;
  private readonly locks = new Locks();
  private readonly sandboxes = new Map<string, E2bSandbox>();
  /** Commands whose sandboxes are being made and not recorded yet: gc leaves them alone. */
  private readonly inFlight = new Set<string>();
  private keepAlive: NodeJS.Timeout | undefined;

  private constructor(
    private readonly o: E2bRuntimeOptions,
    private readonly records: E2bRecords,
  ) {}

  get hostId(): string {
    return this.o.hostId;
  }
  get stateDir(): string {
    return this.o.stateDir;
  }

  /** Opens the records and starts renewing the recorded sandboxes' timeouts. */
  static async open(o: E2bRuntimeOptions): Promise<E2bRuntime> {
    const rt = new E2bRuntime(o, await E2bRecords.open(o.stateDir));
    const every = o.keepAliveMs ?? Math.floor(rt.timeoutMs / 3);
    rt.keepAlive = setInterval(
      () => void rt.renew().catch((e: unknown) => rt.log(`keep-alive: ${String(e)}`)),
      every,
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

  private get timeoutMs(): number {
    return this.o.sandboxTimeoutMs ?? DEFAULT_SANDBOX_TIMEOUT_MS;
  }

  private get api() {
    return sdkOptions(this.o.connection);
  }

  private log(line: string): void {
    this.o.log?.(`e2b: ${line}`);
  }

  // ---------------------------------------------------------------- deploy and fork

  async deploy(req: DeployRequest): Promise<HostEnvironment> {
    const project = checkName("project", req.project);
    const name = checkName("environment", req.environment ?? "alpha");
    const id = `${project}/${name}`;
    const command = req.command ?? `deploy-${newId()}`;
    const phase = req.onPhase ?? noPhases;
    const projectDir = resolve(req.projectDir);
    const { buildTemplate, loadPlan, tarDirectory } = await verbs();
    phase.start("validate");
    const plan =
      req.plan ??
      loadPlan(projectDir, { projectName: project, composeFile: req.composeFile, env: req.env }).plan;
    if (req.kind !== undefined && plan.kind !== req.kind) {
      throw new DenvError("forbidden", HostRefusals.kindMismatch(project, req.kind, plan.kind));
    }
    const service = checkPlan(plan);
    phase.end("validate", { services: [service.name], agent: plan.agent.service });
    return this.locks.with(id, async () => {
      await this.refuseExisting(
        id,
        `environment ${id} exists: destroy it first, or deploy under another name`,
      );
      phase.start("build");
      const template = await this.provider(() =>
        buildTemplate(this.o.connection, {
          hostId: this.hostId,
          project,
          projectDir,
          service,
          onLog: (line) => this.log(`${id} build: ${line}`),
        }),
      );
      phase.end("build", { digests: { [service.name]: template.alias } });
      // Named after the command, which gc leaves alone while it runs.
      let testsTar: string | undefined;
      this.inFlight.add(command);
      try {
        if (plan.verifier?.tests) {
          testsTar = join(this.records.testsDir, `${command}.tar`);
          await tarDirectory(join(projectDir, plan.verifier.tests), testsTar);
        }
        return await this.materialize(
          { id, project, name, plan, command, image: template.alias, testsTar },
          template.alias,
          undefined,
          phase,
        );
      } catch (err) {
        if (testsTar) await rm(testsTar, { force: true });
        throw err;
      } finally {
        this.inFlight.delete(command);
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
      await this.refuseExisting(id, `environment ${id} exists: choose another fork name`);
      return this.materialize(
        {
          id,
          project: version.project,
          name,
          plan: version.plan,
          command,
          image: version.id,
          testsTar: version.testsTar,
        },
        version.snapshotId,
        version,
        opts.onPhase ?? noPhases,
      );
    });
  }

  /**
   * A sandbox for an environment, from a template (a deploy) or a version's snapshot (a fork):
   * created with the environment's labels as metadata and no internet access (unless the file is
   * a service project's that allows egress), the agent's user resolved in it (protection 1), the
   * egress probe run (protection 5), then recorded. A failure kills what it created.
   */
  private async materialize(
    base: {
      id: string;
      project: string;
      name: string;
      plan: Plan;
      command: string;
      image: string;
      testsTar: string | undefined;
    },
    from: string,
    version: E2bVersionRecord | undefined,
    phase: PhaseListener,
  ): Promise<HostEnvironment> {
    const { Sandbox } = await loadE2b();
    const { plan, command } = base;
    const service = plan.agent.service;
    const allowInternetAccess = plan.egress === "allow";
    const started = Date.now();
    phase.start("place");
    if (version) phase.end("place", { host: this.hostId }, "restore");
    else phase.end("place", { host: this.hostId }, "start");
    this.inFlight.add(command);
    let sbx: E2bSandbox | undefined;
    try {
      sbx = await this.provider(() =>
        Sandbox.create(from, {
          ...this.api,
          metadata: labelsFor({
            host: this.hostId,
            project: base.project,
            environment: base.id,
            role: "service",
            command,
            service,
          }),
          envs: plan.services[0]?.environment ?? {},
          allowInternetAccess,
          timeoutMs: this.timeoutMs,
        }),
      );
      const created = Date.now();
      const info = await sbx.getInfo();
      if (version) phase.end("restore", { version: version.id, method: METHOD }, "start");
      phase.end("start", { containers: { [service]: sbx.sandboxId } });
      const agent = await resolveSandboxUser(sbx, plan.agent.user);
      if (plan.kind === "rl-environment") await refuseRootAgent(sbx, agent, service);
      let probe: EgressProbe | { skipped: string };
      const probeStart = Date.now();
      if (allowInternetAccess) probe = { skipped: "egress is allowed (a service project)" };
      else {
        phase.start("probe");
        probe = await this.probe(sbx, agent, service);
        if (!probe.ok) {
          throw new DenvError("egress_leak", Protection.egressLeak(base.id, probe.findings[0] ?? "unknown"));
        }
        phase.end("probe", probe);
      }
      const { processBaseline } = await verbs();
      const baseline = await this.provider(() => processBaseline(sbx as E2bSandbox));
      const done = Date.now();
      const { testsTar, ...named } = base;
      const rec: E2bEnvironmentRecord = {
        ...named,
        ...(testsTar ? { testsTar } : {}),
        sandboxId: sbx.sandboxId,
        templateId: info.templateId,
        agent: plan.agent,
        agentName: agent.name,
        agentUid: agent.uid,
        allowInternetAccess,
        ...(version ? { parentVersion: version.id } : {}),
        timings: { create_ms: created - started, probe_ms: done - probeStart, total_ms: done - started },
        probe,
        baseline,
        createdAt: new Date(started).toISOString(),
      };
      await this.records.putEnvironment(rec);
      this.sandboxes.set(rec.id, sbx);
      return this.hostEnvironment(rec);
    } catch (err) {
      if (sbx)
        await sbx
          .kill()
          .catch((e: unknown) => this.log(`${base.id}: could not kill ${sbx?.sandboxId}: ${String(e)}`));
      throw err;
    } finally {
      this.inFlight.delete(command);
    }
  }

  // ---------------------------------------------------------------- exec and files

  async exec(envId: string, o: ExecOptions): Promise<RawExecResult> {
    const { rec, sbx } = await this.open(envId);
    const user = await agentPrincipal(sbx, rec.plan, { service: o.service, user: o.user }, this.agentOf(rec));
    return this.provider(() => execInSandbox(sbx, user, o.cwd ?? rec.agent.workdir, o));
  }

  async putFiles(envId: string, dir: string, archive: Readable | Buffer, t: FilesTarget = {}) {
    const { rec, sbx } = await this.open(envId);
    const user = await agentPrincipal(sbx, rec.plan, t, this.agentOf(rec));
    const { putSandboxFiles } = await verbs();
    return this.provider(() => putSandboxFiles(sbx, user, dir, archive));
  }

  async getFiles(envId: string, path: string, t: FilesTarget = {}): Promise<Readable> {
    const { rec, sbx } = await this.open(envId);
    const user = await agentPrincipal(sbx, rec.plan, t, this.agentOf(rec));
    const { getSandboxFiles } = await verbs();
    return this.provider(() => getSandboxFiles(sbx, user, path));
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
      const number =
        opts.number ??
        1 +
          Math.max(
            0,
            ...(await this.records.versions()).filter((v) => v.project === rec.project).map((v) => v.number),
          );
      const id = `${rec.project}@v${number}`;
      if (await this.records.getVersion(id)) throw new DenvError("conflict", `version ${id} exists`);
      const started = Date.now();
      phase.start("capture layers");
      // Named so that gc finds a snapshot a crash left unrecorded (names are unique: E2B adds a
      // build to an existing name).
      const snapshotName = `${templatePrefix(this.hostId)}${slug(rec.project, 24)}-v${number}-${newId()}`;
      const snap = await this.provider(() => sbx.createSnapshot({ name: snapshotName }));
      const took = Date.now() - started;
      phase.end("capture layers", { committed: [rec.plan.agent.service] });
      const v: E2bVersionRecord = {
        id,
        project: rec.project,
        number,
        snapshotId: snap.snapshotId,
        sourceEnvironment: rec.id,
        ...(rec.parentVersion ? { parentVersion: rec.parentVersion } : {}),
        plan: rec.plan,
        agent: rec.agent,
        agentName: rec.agentName,
        agentUid: rec.agentUid,
        allowInternetAccess: rec.allowInternetAccess,
        command,
        ...(rec.testsTar ? { testsTar: rec.testsTar } : {}),
        timings: { snapshot_ms: took, total_ms: Date.now() - started },
        createdAt: new Date(started).toISOString(),
      };
      await this.records.putVersion(v);
      return this.hostVersion(v);
    });
  }

  async deleteVersion(versionId: string): Promise<void> {
    const { Sandbox } = await loadE2b();
    const v = await this.requireVersion(versionId);
    await this.provider(() => Sandbox.deleteSnapshot(v.snapshotId, this.api));
    await this.records.deleteVersion(v.id);
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
      await this.provider(() => Sandbox.kill(rec.sandboxId, this.api));
      this.sandboxes.delete(envId);
      await this.records.deleteEnvironment(envId);
      phase.end("destroy", { services: [rec.plan.agent.service], volumes: [] });
    });
  }

  async probeEgress(envId: string): Promise<EgressProbe> {
    const { rec, sbx } = await this.open(envId);
    return this.probe(sbx, this.agentOf(rec), rec.plan.agent.service);
  }

  /** Grades the environment on a fork, the verifier in the fork's sandbox (e2b-verify.ts). */
  async verify(envId: string, opts: VerifyOptions = {}): Promise<HostVerifyResult> {
    const { verifyOnE2b } = await verbs();
    return verifyOnE2b(
      {
        environment: (id) => this.open(id),
        snapshot: (id, o) => this.snapshot(id, o),
        version: (id) => this.version(id),
        fork: (id, o) => this.fork(id, o),
        destroy: (id) => this.destroy(id),
      },
      envId,
      opts,
    );
  }
  async stop(_envId: string): Promise<HostEnvironment> {
    throw this.unsupported("stop", "the runtime does not pause E2B sandboxes yet");
  }
  async start(_envId: string): Promise<HostEnvironment> {
    throw this.unsupported("start", "the runtime does not pause E2B sandboxes yet");
  }
  async logs(_envId: string): Promise<{ stdout: string; stderr: string }> {
    throw this.unsupported("logs", "a sandbox runs no service process of denv's to read the logs of");
  }

  // ---------------------------------------------------------------- what the host holds

  async list(): Promise<{ environments: HostEnvironment[]; versions: Version[] }> {
    const environments = (await this.records.environments()).map((r) => this.hostEnvironment(r));
    const versions = (await this.records.versions())
      .sort((a, b) => a.number - b.number)
      .map((v) => this.hostVersion(v));
    return { environments, versions };
  }

  async has(envId: string): Promise<boolean> {
    return (await this.records.getEnvironment(envId)) !== undefined;
  }

  async version(versionId: string): Promise<Version> {
    return this.hostVersion(await this.requireVersion(versionId));
  }

  /**
   * Kills the sandboxes that carry this host's id and no record owns (nor a command still making
   * them), deletes the snapshots named as this host's that no version records, and the tests
   * archives that no record names.
   */
  async gc(): Promise<{ removed: string[] }> {
    const { Sandbox } = await loadE2b();
    const owned = new Set((await this.records.environments()).map((r) => r.sandboxId));
    const removed: string[] = [];
    const errors: unknown[] = [];
    for (const info of await this.sandboxesWith({ [Labels.host]: this.hostId })) {
      const cmd = info.metadata[Labels.command];
      if (owned.has(info.sandboxId) || (cmd !== undefined && this.inFlight.has(cmd))) continue;
      await Sandbox.kill(info.sandboxId, this.api).then(
        () => removed.push(`sandbox ${info.sandboxId}`),
        (e: unknown) => errors.push(e),
      );
    }
    const kept = new Set((await this.records.versions()).map((v) => v.snapshotId));
    const prefix = templatePrefix(this.hostId);
    const pages = Sandbox.listSnapshots(this.api);
    const snapshots = [];
    while (pages.hasNext) snapshots.push(...(await pages.nextItems()));
    for (const s of snapshots) {
      const ours = s.names.some((n) => (n.split("/").pop() ?? "").startsWith(prefix) && /-v\d+-/.test(n));
      if (!ours || kept.has(s.snapshotId)) continue;
      await Sandbox.deleteSnapshot(s.snapshotId, this.api).then(
        () => removed.push(`snapshot ${s.snapshotId}`),
        (e: unknown) => errors.push(e),
      );
    }
    for (const file of await this.records.unreferencedTests()) {
      if (this.inFlight.has(basename(file, ".tar"))) continue;
      await rm(file, { force: true });
      removed.push(`tests ${basename(file)}`);
    }
    if (errors.length > 0) throw new AggregateError(errors, `e2b gc: ${errors.length} removal(s) failed`);
    return { removed };
  }

  /**
   * What a crash left of a command: a deploy or fork whose sandbox was recorded and still runs is
   * done; one that made a sandbox and did not record it has it killed. A snapshot whose version
   * was recorded is done; otherwise gc deletes what it left (its snapshot is named as this host's).
   */
  async settle(command: Parameters<HostRuntime["settle"]>[0]): Promise<Settled> {
    const { Sandbox } = await loadE2b();
    switch (command.kind) {
      case "env.deploy":
      case "env.fork":
      case "env.restore": {
        const made = (await this.records.environments()).filter((r) => r.command === command.id);
        const rec = made[0];
        if (made.length === 1 && rec) {
          const running = await Sandbox.getInfo(rec.sandboxId, this.api).then(
            () => true,
            () => false,
          );
          if (running) return { done: true, result: this.hostEnvironment(rec) };
        }
        for (const r of made) await this.records.deleteEnvironment(r.id);
        for (const info of await this.sandboxesWith({
          [Labels.host]: this.hostId,
          [Labels.command]: command.id,
        })) {
          await Sandbox.kill(info.sandboxId, this.api);
        }
        return { done: false, rolledBack: true };
      }
      case "env.snapshot": {
        const v = (await this.records.versions()).find((x) => x.command === command.id);
        if (v) return { done: true, result: this.hostVersion(v) };
        await this.gc();
        return { done: false, rolledBack: true };
      }
      default:
        return { done: false, rolledBack: false };
    }
  }

  // ---------------------------------------------------------------- helpers

  private async sandboxesWith(metadata: Record<string, string>) {
    const { Sandbox } = await loadE2b();
    const pages = Sandbox.list({
      ...this.api,
      query: { metadata: { [Labels.managed]: "true", ...metadata } },
    });
    const out = [];
    while (pages.hasNext) out.push(...(await pages.nextItems()));
    return out;
  }

  private async renew(): Promise<void> {
    const { Sandbox } = await loadE2b();
    for (const rec of await this.records.environments()) {
      await Sandbox.setTimeout(rec.sandboxId, this.timeoutMs, this.api).catch((e: unknown) =>
        this.log(`${rec.id}: sandbox ${rec.sandboxId} not renewed: ${String(e)}`),
      );
    }
  }

  private probe(sbx: E2bSandbox, agent: SandboxUser, service: string): Promise<EgressProbe> {
    if (this.o.egressCanaries.length === 0)
      throw new DenvError("conflict", ProviderMessages.noCanary(PROVIDER));
    return this.provider(() => probeSandboxEgress(sbx, agent, service, this.o.egressCanaries));
  }

  private agentOf(rec: E2bEnvironmentRecord): SandboxUser {
    return { name: rec.agentName, uid: rec.agentUid };
  }

  private async refuseExisting(id: string, message: string): Promise<void> {
    if (await this.records.getEnvironment(id)) throw new DenvError("conflict", message);
  }

  private async requireEnvironment(envId: string): Promise<E2bEnvironmentRecord> {
    const rec = await this.records.getEnvironment(envId);
    if (!rec) throw new DenvError("not_found", `environment ${envId} not found on host ${this.hostId}`);
    return rec;
  }

  private async requireVersion(versionId: string): Promise<E2bVersionRecord> {
    const v = await this.records.getVersion(versionId);
    if (!v) throw new DenvError("not_found", `version ${versionId} not found on host ${this.hostId}`);
    return v;
  }

  /** The environment's record and its sandbox, connected once and kept. */
  private async open(envId: string): Promise<{ rec: E2bEnvironmentRecord; sbx: E2bSandbox }> {
    const rec = await this.requireEnvironment(envId);
    let sbx = this.sandboxes.get(envId);
    if (!sbx || sbx.sandboxId !== rec.sandboxId) {
      const { Sandbox } = await loadE2b();
      sbx = await this.provider(() =>
        Sandbox.connect(rec.sandboxId, { ...this.api, timeoutMs: this.timeoutMs }),
      );
      this.sandboxes.set(envId, sbx);
    }
    return { rec, sbx };
  }

  /** E2B's errors as denv's: a missing sandbox, a refused key, or E2B failing (502). */
  private async provider<T>(fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch (err) {
      if (err instanceof DenvError) throw err;
      const sdk = await loadE2b();
      const message = err instanceof Error ? err.message : String(err);
      if (err instanceof sdk.SandboxNotFoundError)
        throw new DenvError("not_found", `${PROVIDER}: ${message}`);
      if (err instanceof sdk.AuthenticationError)
        throw new DenvError("unauthorized", `${PROVIDER}: ${message}`);
      if (err instanceof sdk.FileNotFoundError) throw new DenvError("not_found", `${PROVIDER}: ${message}`);
      throw new DenvError("docker", `${PROVIDER}: ${message}`);
    }
  }

  private unsupported(verb: string, why: string): DenvError {
    return new DenvError("conflict", ProviderMessages.unsupportedVerb(PROVIDER, verb, why));
  }

  private hostEnvironment(rec: E2bEnvironmentRecord): HostEnvironment {
    const svc = rec.plan.agent.service;
    const policy = `e2b network policy (allowInternetAccess: ${rec.allowInternetAccess})`;
    return {
      id: rec.id,
      project: rec.project,
      name: rec.name,
      status: "running",
      ...(rec.parentVersion ? { parent_version: rec.parentVersion } : {}),
      agent: rec.agent,
      services: [{ name: svc, container_id: rec.sandboxId, image: rec.image, image_id: rec.templateId }],
      // E2B gives a sandbox no network of denv's: the policy is what isolates it.
      network: { id: rec.sandboxId, name: policy, subnet: "", gateway: "" },
      evidence: {
        placement: { host: this.hostId, reason: `a bridge to ${PROVIDER}: one sandbox per environment` },
        network: { name: policy, subnet: "", internal: !rec.allowInternetAccess },
        volumes: { method: "none", from: rec.parentVersion ?? null },
        images: { [svc]: rec.templateId },
        // One call creates and starts a sandbox, and nothing runs a healthcheck: those spans are 0.
        timings: {
          create_ms: rec.timings.create_ms,
          start_ms: 0,
          health_ms: 0,
          probe_ms: rec.timings.probe_ms,
          total_ms: rec.timings.total_ms,
        },
        probe: rec.probe,
        egress: { mode: rec.plan.egress },
      },
    };
  }

  private hostVersion(v: E2bVersionRecord): Version {
    return {
      id: v.id,
      project: v.project,
      number: v.number,
      host_id: this.hostId,
      source_environment: v.sourceEnvironment,
      ...(v.parentVersion ? { parent_version: v.parentVersion } : {}),
      digests: { [v.plan.agent.service]: v.snapshotId },
      volumes: {},
      method: METHOD,
      // E2B does not say how large a snapshot is.
      sizes: { layer_bytes: 0, volume_bytes: 0 },
      timings: v.timings,
      created_at: v.createdAt,
    };
  }
}
