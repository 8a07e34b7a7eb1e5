import { randomBytes } from "node:crypto";
import { DenvError, type HostEnvironment, type HostVerifyResult, type Plan, type Version } from "@denv/spec";
import { noPhases } from "../runtime/phase-listener.js";
import type { VerifyOptions } from "../runtime/verify-environment.js";
import {
  checkSmokeVersion,
  noVerifier,
  refusedSubmission,
  sandboxVerifyResult,
} from "../runtime/verify-results.js";
import {
  type CollectedSubmission,
  collectSubmission,
  gradeInSandbox,
  type SandboxGrade,
  type SandboxOps,
} from "./sandbox-grade.js";

/** One environment's sandbox as the verify on a fork sees it. */
export interface ForkSandbox {
  rec: { project: string; plan: Plan; sandboxId: string; agentUid: number; testsTar?: string | undefined };
  /** What the sandbox was made from, as the verifier's evidence names its image. */
  image: string;
  ops: SandboxOps;
  /** Kills every process of the agent's in the sandbox (protection 2's first step). */
  stopAgent(): Promise<{ killed: number; survivors: number }>;
}

/** What the verify on a fork needs of a provider's runtime: the steps of an episode. */
export interface ForkEpisode {
  /** The provider as the evidence's isolation says it ("e2b"). */
  name: string;
  environment(envId: string): Promise<ForkSandbox>;
  snapshot(envId: string, opts: { command: string; number?: number | undefined }): Promise<Version>;
  version(versionId: string): Promise<Version>;
  fork(versionId: string, opts: { name: string; command: string }): Promise<HostEnvironment>;
  destroy(envId: string): Promise<void>;
  /**
   * A sandbox of the verifier's own for a fork (x-denv.verifier.services: false), without
   * internet access, from `from` ("the verifier's template"); `release` removes it. A provider
   * without one refuses such a verifier at deploy.
   */
  verifierSandbox?(
    forkId: string,
    command: string,
  ): Promise<{ ops: SandboxOps; sandboxId: string; image: string; from: string; release(): Promise<void> }>;
  /**
   * Whether the verifier gets a sandbox of its own though it reaches the services (a provider
   * whose sandboxes share a network: Prime's, when the verifier has an image of its own).
   */
  ownVerifierSandbox?(plan: Plan): boolean;
}

/**
 * Protection 2 in a provider's sandboxes (E2B's, Prime's): the agent's processes killed in the
 * episode's sandbox, a snapshot of it, a fork (a new sandbox from the snapshot, probed as every
 * sandbox is), and the verifier run in the fork's sandbox as its own uid, or, when it reads only
 * files and the provider gives it one, in a sandbox of its own (sandbox-grade.ts says what each
 * isolates). The result has denvd's own runtime's shape; `verifier.isolation` says where the
 * verifier ran.
 */
export async function verifyOnFork(
  episode: ForkEpisode,
  envId: string,
  opts: VerifyOptions = {},
): Promise<HostVerifyResult> {
  const phase = opts.onPhase ?? noPhases;
  const env = await episode.environment(envId);
  const { rec } = env;
  const vplan = rec.plan.verifier;
  if (!vplan) throw noVerifier(envId);
  const command = opts.command ?? `verify-${randomBytes(4).toString("hex")}`;
  const t0 = Date.now();
  let agent: { killed: number; survivors: number } | undefined;
  let version: Version;
  let tStopped = t0;
  if (opts.smokeVersion !== undefined) {
    version = await episode.version(opts.smokeVersion);
    checkSmokeVersion(version, rec.project);
    phase.start("fork");
  } else {
    phase.start("stop agent");
    agent = await env.stopAgent();
    tStopped = Date.now();
    phase.end("stop agent", agent, "snapshot");
    version = await episode.snapshot(envId, { command, number: opts.number });
  }
  const tSnap = Date.now();
  const snapshot = {
    version: version.id,
    method: version.method,
    // The provider snapshots a running sandbox; a runtime that stops the services meanwhile (Prime
    // with several) reports how long.
    frozen_ms: version.timings.frozen_ms ?? 0,
    total_ms: version.timings.total_ms ?? tSnap - tStopped,
  };
  if (agent) phase.end("snapshot", snapshot, "fork");
  const fork = await episode.fork(version.id, { name: `verify-${randomBytes(3).toString("hex")}`, command });
  const tForked = Date.now();
  phase.end("fork", { environment: fork.id, services: "started" }, "probe");
  phase.end("probe", fork.evidence.probe);
  const episodeEvidence = {
    ...(agent ? { agent } : {}),
    snapshot,
    fork: { environment: fork.id, probe: fork.evidence.probe },
  };
  const outcome = { version: version.id, fork: fork.id, snapshot: version };
  let own: Awaited<ReturnType<NonNullable<ForkEpisode["verifierSandbox"]>>> | undefined;
  try {
    phase.start("run verifier");
    const forked = await episode.environment(fork.id);
    let grade: SandboxGrade;
    let submission: CollectedSubmission | undefined;
    try {
      submission = await collectSubmission(forked.ops, vplan.submission);
      // A verifier that reads only files gets a sandbox of its own, so does one of an image of its
      // own where the provider joins it to the fork's network; else it shares the fork's
      // sandbox, as a uid of its own.
      const ownSandbox = vplan.services === false || episode.ownVerifierSandbox?.(forked.rec.plan) === true;
      if (ownSandbox && episode.verifierSandbox) own = await episode.verifierSandbox(fork.id, command);
      grade = await gradeInSandbox(own?.ops ?? forked.ops, {
        verifier: vplan,
        agentUid: own ? undefined : forked.rec.agentUid,
        testsTar: forked.rec.testsTar,
        submission,
      });
    } catch (err) {
      if (!(err instanceof DenvError && err.code === "special_file")) throw err;
      return refusedSubmission(err, vplan, outcome, episodeEvidence, Date.now() - t0);
    } finally {
      await submission?.cleanup();
    }
    const as = `as uid ${grade.user.uid} (${grade.user.name})`;
    const verifier = {
      container_id: own?.sandboxId ?? forked.rec.sandboxId,
      image: own?.image ?? forked.image,
      user: vplan.user,
      exit_code: grade.timedOut ? null : grade.exitCode,
      timed_out: grade.timedOut,
      duration_ms: grade.durationMs,
      isolation: own
        ? `${episode.name}: a sandbox of its own ${own.sandboxId} from ${own.from}, ${as}, without internet access`
        : `${episode.name}: the fork's sandbox ${forked.rec.sandboxId}, ${as}; /tests and /logs/verifier are that uid's alone`,
    };
    phase.end("run verifier", verifier, "collect");
    phase.end("collect", { reward: grade.reward?.reward ?? null });
    return sandboxVerifyResult({
      grade,
      vplan,
      outcome,
      episode: episodeEvidence,
      verifier,
      times: { t0, stopped: tStopped, snapshot: tSnap, forked: tForked, agentStopped: agent !== undefined },
    });
  } finally {
    phase.start("clean up");
    const removed: string[] = [];
    if (own) {
      await own.release();
      removed.push(`verifier sandbox ${own.sandboxId}`);
    }
    if (!opts.keepFork) {
      await episode.destroy(fork.id);
      removed.push(`fork ${fork.id}`);
    }
    phase.end("clean up", { removed });
  }
}
