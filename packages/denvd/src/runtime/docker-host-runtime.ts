import type { Readable } from "node:stream";
import type { EgressProbe, HostEnvironment, HostVerifyResult, Version } from "@denv/spec";
import type { RawExecResult } from "../exec-runner.js";
import type { ExecOptions } from "./environment-exec.js";
import type { FilesTarget } from "./environment-files.js";
import { egressProbe, hostVersion } from "./host-reports.js";
import type { HostRuntime, Settled } from "./host-runtime.js";
import type { PhaseListener } from "./phase-listener.js";
import type { DeployRequest, Runtime } from "./runtime.js";
import type { VerifyOptions } from "./verify-environment.js";

/**
 * The host runtime of a denvd that runs environments itself: denv's runtime on this machine's
 * Docker engine (Runtime, which tests and benchmarks also drive as a library), its results in the
 * protocol's types.
 */
export class DockerHostRuntime implements HostRuntime {
  constructor(readonly engine: Runtime) {}

  get hostId(): string {
    return this.engine.host.hostId;
  }
  get stateDir(): string {
    return this.engine.host.stateDir;
  }

  deploy(req: DeployRequest): Promise<HostEnvironment> {
    return this.engine.deploy(req);
  }
  fork(
    versionId: string,
    opts?: { name?: string; command?: string; onPhase?: PhaseListener; start?: boolean },
  ): Promise<HostEnvironment> {
    return this.engine.fork(versionId, opts);
  }
  async snapshot(
    envId: string,
    opts?: { command?: string; onPhase?: PhaseListener; number?: number | undefined },
  ): Promise<Version> {
    return hostVersion(await this.engine.snapshot(envId, opts), this.hostId);
  }
  verify(envId: string, opts?: VerifyOptions): Promise<HostVerifyResult> {
    return this.engine.verify(envId, opts);
  }
  exec(envId: string, o: ExecOptions): Promise<RawExecResult> {
    return this.engine.exec(envId, o);
  }
  putFiles(envId: string, dir: string, archive: Readable | Buffer, t?: FilesTarget) {
    return this.engine.putFiles(envId, dir, archive, t);
  }
  getFiles(envId: string, path: string, t?: FilesTarget): Promise<Readable> {
    return this.engine.getFiles(envId, path, t);
  }
  stop(envId: string, opts?: { onPhase?: PhaseListener }): Promise<HostEnvironment> {
    return this.engine.stop(envId, opts);
  }
  start(envId: string, opts?: { onPhase?: PhaseListener }): Promise<HostEnvironment> {
    return this.engine.start(envId, opts);
  }
  destroy(envId: string, opts?: { onPhase?: PhaseListener }): Promise<void> {
    return this.engine.destroy(envId, opts);
  }
  deleteVersion(versionId: string): Promise<void> {
    return this.engine.deleteVersion(versionId);
  }
  async probeEgress(envId: string): Promise<EgressProbe> {
    return egressProbe(await this.engine.probeEgress(envId));
  }
  logs(envId: string, service?: string, tail?: number): Promise<{ stdout: string; stderr: string }> {
    return this.engine.logs(envId, service, tail);
  }
  async list(): Promise<{ environments: HostEnvironment[]; versions: Version[] }> {
    const held = await this.engine.list();
    return {
      environments: held.environments,
      versions: held.versions.map((v) => hostVersion(v, this.hostId)),
    };
  }
  has(envId: string): Promise<boolean> {
    return this.engine.has(envId);
  }
  async version(versionId: string): Promise<Version> {
    return hostVersion(await this.engine.version(versionId), this.hostId);
  }
  gc(): Promise<{ removed: string[] }> {
    return this.engine.gc();
  }
  async settle(command: Parameters<HostRuntime["settle"]>[0]): Promise<Settled> {
    // Loaded only when a crash left a command to settle.
    const { settleCommand } = await import("./settle-command.js");
    return settleCommand(this.engine, command);
  }
  close(): Promise<void> {
    return this.engine.close();
  }
}
