import type { Readable } from "node:stream";
import type { CommandKind, EgressProbe, HostEnvironment, HostVerifyResult, Version } from "@denv/spec";
import { DenvError } from "@denv/spec/errors";
import { HostRefusals } from "@denv/spec/messages";
import type { RawExecResult } from "../exec-runner.js";
import type { ExecOptions } from "./environment-exec.js";
import type { FilesTarget } from "./environment-files.js";
import type { PhaseListener } from "./phase-listener.js";
import type { DeployRequest, Runtime } from "./runtime.js";
import type { VerifyOptions } from "./verify-environment.js";

/**
 * What denvd's agent asks of whatever stands environments up behind a host, chosen once at
 * start-up: denv's own runtime on this machine's Docker engine (DockerHostRuntime over Runtime),
 * or a hosted provider's sandboxes (a provider runtime: the host is then a bridge to the
 * provider, and the provider enforces what its capability row says). The agent's handlers, its
 * hello and its crash reconcile use only this; results are the protocol's own types.
 *
 * What needs this machine's engine itself (version transfers between hosts, port tunnels into a
 * service) asks for `engine`, and a runtime without one refuses it in one line.
 */
export interface HostRuntime {
  readonly hostId: string;
  /** denvd's state folder (the journal, deploy sources, what the runtime keeps). */
  readonly stateDir: string;
  /** denv's own runtime on this machine's Docker engine; absent on a provider's. */
  readonly engine?: Runtime;

  /** Builds the project's images (or the provider's templates) and stands an environment up. */
  deploy(req: DeployRequest): Promise<HostEnvironment>;
  /** A new environment from a version; `start: false` creates it without starting services. */
  fork(
    versionId: string,
    opts?: { name?: string; command?: string; onPhase?: PhaseListener; start?: boolean },
  ): Promise<HostEnvironment>;
  /** Records a version of the environment as it is now (all of it at one point in time). */
  snapshot(
    envId: string,
    opts?: { command?: string; onPhase?: PhaseListener; number?: number | undefined },
  ): Promise<Version>;
  /** Stops the agent, snapshots, runs the verifier on a fork and returns its grade. */
  verify(envId: string, opts?: VerifyOptions): Promise<HostVerifyResult>;
  exec(envId: string, o: ExecOptions): Promise<RawExecResult>;
  /** Extracts a tar archive into `dir` as the target user, after the special-file check. */
  putFiles(
    envId: string,
    dir: string,
    archive: Readable | Buffer,
    t?: FilesTarget,
  ): Promise<{ entries: number; bytes: number }>;
  /** A tar archive of `path`, read as the target user. */
  getFiles(envId: string, path: string, t?: FilesTarget): Promise<Readable>;
  stop(envId: string, opts?: { onPhase?: PhaseListener }): Promise<HostEnvironment>;
  start(envId: string, opts?: { onPhase?: PhaseListener }): Promise<HostEnvironment>;
  destroy(envId: string, opts?: { onPhase?: PhaseListener }): Promise<void>;
  deleteVersion(versionId: string): Promise<void>;
  /** The egress probe's evidence: what isolates the environment, and what enforced it. */
  probeEgress(envId: string): Promise<EgressProbe>;
  logs(envId: string, service?: string, tail?: number): Promise<{ stdout: string; stderr: string }>;

  /** Everything the host holds, for its hello. */
  list(): Promise<{ environments: HostEnvironment[]; versions: Version[] }>;
  has(envId: string): Promise<boolean>;
  version(versionId: string): Promise<Version>;
  /** Removes what carries this host's id and no record owns. */
  gc(): Promise<{ removed: string[] }>;
  /**
   * After a crash: what a command the journal holds as started left behind. Finished: its
   * result; half done: what it made is removed and `undefined` says so (the journal records the
   * command as interrupted). Never runs the command again.
   */
  settle(command: { id: string; kind: CommandKind; environment?: string | undefined }): Promise<Settled>;
  close(): Promise<void>;
}

/** What a crash left of a command: its result, or nothing (rolled back, or nothing to settle). */
export type Settled =
  | { done: true; result: HostEnvironment | Version }
  | { done: false; rolledBack: boolean };

/** The host's own engine runtime, for `what`; refused in one line on a host without one. */
export function requireEngine(rt: HostRuntime, what: string): Runtime {
  if (rt.engine) return rt.engine;
  throw new DenvError("conflict", HostRefusals.needsEngine(what, rt.hostId));
}
