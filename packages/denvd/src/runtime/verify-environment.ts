import { randomBytes } from "node:crypto";
import { createReadStream } from "node:fs";
import { DenvError, type HostEnvironment, type HostVerifyResult, type VerifierPlan } from "@denv/spec";
import { type MirrorEgress, openMirrorEgress } from "../build/mirror-egress.js";
import { verifierContainerSpec } from "../container-spec.js";
import { packEntries } from "../files/tar-pack.js";
import type { EnvironmentRecord, ImageRecord } from "../records.js";
import type { HostContext } from "./host-context.js";
import { hostVersion, type VersionInfo } from "./host-reports.js";
import { noPhases, type PhaseListener } from "./phase-listener.js";
import { resolveIds } from "./principals.js";
import { REWARD_DIR, readReward } from "./reward.js";
import { collectSubmission, SUBMISSION_DIR, type Submission } from "./submission.js";
import { checkSmokeVersion, noVerifier, refusedSubmission, ungradedMessage } from "./verify-results.js";

/**
 * Protection 2: grading as a separate principal, after the agent stops, on a fork. The
 * verifier's own container (own image, own non-root uid, the tests copied only there, a fresh
 * reward directory) joins the fork's network and receives the submission paths copied out of
 * the fork after the special-file check (protection 3).
 */

export const TESTS_DIR = "/tests";

/** What the verifier needs of the runtime: the steps of an episode, nothing else. */
export interface EpisodePort {
  environment(envId: string): Promise<EnvironmentRecord>;
  stopAgent(envId: string): Promise<{ killed: number; survivors: number }>;
  snapshot(envId: string, opts: { command: string; number?: number | undefined }): Promise<VersionInfo>;
  version(versionId: string): Promise<VersionInfo>;
  fork(versionId: string, opts: { name: string; command: string; start: boolean }): Promise<HostEnvironment>;
  destroy(envId: string): Promise<void>;
}

export interface VerifyOptions {
  command?: string;
  keepFork?: boolean;
  onPhase?: PhaseListener;
  number?: number;
  /**
   * A smoke verify (x-denv.verifier.smoke): this version of the environment's project is graded
   * untouched, on a fork of it. No agent ran in it, so none is stopped, and nothing is snapshotted.
   */
  smokeVersion?: string;
}

/**
 * The grade: graded (the verifier wrote a reward), refused (a submission path held a special
 * file; reward 0) or failed (the verifier wrote no reward or timed out; reward 0), with its
 * evidence and the episode's snapshot, a version the control plane records like any other.
 */
export async function verifyEnvironment(
  ctx: HostContext,
  episode: EpisodePort,
  envId: string,
  opts: VerifyOptions = {},
): Promise<HostVerifyResult> {
  const phase = opts.onPhase ?? noPhases;
  const rec = await episode.environment(envId);
  const vplan = rec.plan.verifier;
  const verifierImage = rec.verifierImage;
  if (!vplan || !verifierImage) throw noVerifier(envId);
  const command = opts.command ?? `verify-${randomBytes(4).toString("hex")}`;
  const t0 = Date.now();
  let agent: { killed: number; survivors: number } | undefined;
  let version: VersionInfo;
  let tStopped = t0;
  if (opts.smokeVersion !== undefined) {
    version = await episode.version(opts.smokeVersion);
    checkSmokeVersion(version, rec.project);
  } else {
    phase.start("stop agent");
    agent = await episode.stopAgent(envId);
    tStopped = Date.now();
    phase.end("stop agent", agent, "snapshot");
    version = await episode.snapshot(envId, { command, number: opts.number });
  }
  const snapshot = {
    version: version.id,
    method: version.method,
    frozen_ms: version.timings.frozenMs,
    total_ms: version.timings.totalMs,
  };
  if (agent) phase.end("snapshot", snapshot, "fork");
  else phase.start("fork");
  const tSnap = Date.now();
  // x-denv.verifier.services: false: the fork's files are all the verifier reads, so none of its
  // services is started, and the verifier gets no network (see createVerifier).
  const withServices = vplan.services !== false;
  const fork = await episode.fork(version.id, {
    name: `verify-${randomBytes(3).toString("hex")}`,
    command,
    start: withServices,
  });
  const tForked = Date.now();
  phase.end("fork", { environment: fork.id, services: withServices ? "started" : "not started" }, "probe");
  // The fork was probed as it came up; this phase reports that probe.
  phase.end("probe", fork.evidence.probe);
  // What every outcome reports: the agent stopped, the episode's snapshot, the fork it ran on.
  const episodeEvidence = {
    ...(agent ? { agent } : {}),
    snapshot,
    fork: { environment: fork.id, probe: fork.evidence.probe },
  };
  const outcome = { version: version.id, fork: fork.id, snapshot: hostVersion(version, ctx.hostId) };
  let verifierId = "";
  let submission: Submission | undefined;
  let egress: MirrorEgress | undefined;
  try {
    phase.start("run verifier");
    const forkRec = await episode.environment(fork.id);
    try {
      submission = await collectSubmission(
        ctx.docker,
        forkRec.containers[rec.plan.agent.service] as string,
        vplan.submission,
        vplan.timeoutSec * 1000,
      );
    } catch (err) {
      if (!(err instanceof DenvError && err.code === "special_file")) throw err;
      return refusedSubmission(err, vplan, outcome, episodeEvidence, Date.now() - t0);
    }
    // Egress by phase: the tests may fetch from the host's mirrors while they run, nothing else.
    if (vplan.egress === "mirrors")
      egress = await openMirrorEgress(forkRec.network, ctx.settings.buildMirrors);
    verifierId = await createVerifier(
      ctx,
      forkRec,
      vplan,
      verifierImage,
      version.id,
      command,
      egress?.env ?? {},
    );
    await prepareVerifier(ctx, verifierId, vplan, rec.testsTar, submission);
    const tReady = Date.now();
    const run = await runVerifier(ctx, verifierId, vplan.timeoutSec);
    const tRan = Date.now();
    const verifier = {
      container_id: verifierId,
      image: verifierImage.imageId,
      user: vplan.user,
      exit_code: run.timedOut ? null : run.exitCode,
      timed_out: run.timedOut,
      duration_ms: tRan - tReady,
      egress: egress?.evidence(),
    };
    phase.end("run verifier", verifier, "collect");
    const reward = run.timedOut ? undefined : await readReward(ctx.docker, verifierId);
    phase.end("collect", { reward: reward?.reward ?? null });
    const agentEgress = ctx.agentEgress.get(envId)?.evidence();
    const evidence: HostVerifyResult["evidence"] = {
      ...episodeEvidence,
      // x-denv.egress: mirrors: every request the agent's episode made through the proxy.
      ...(agentEgress ? { agent_egress: agentEgress } : {}),
      submission: submission.entries,
      verifier,
      timings: {
        ...(agent ? { stop_agent_ms: tStopped - t0, snapshot_ms: tSnap - tStopped } : {}),
        fork_ms: tForked - tSnap,
        prepare_ms: tReady - tForked,
        run_ms: tRan - tReady,
        total_ms: Date.now() - t0,
      },
    };
    if (!reward) {
      const message = ungradedMessage(run, vplan.timeoutSec);
      return { status: "failed", reward: 0, rewards: {}, message, log: run.log, ...outcome, evidence };
    }
    return { status: "graded", ...reward, log: run.log, ...outcome, evidence };
  } finally {
    phase.start("clean up");
    const removed: string[] = [];
    await egress?.close();
    await submission?.cleanup();
    if (verifierId) {
      await ctx.docker.containers.remove(verifierId);
      removed.push(`verifier ${verifierId}`);
    }
    if (!opts.keepFork) {
      await episode.destroy(fork.id);
      removed.push(`fork ${fork.id}`);
    }
    phase.end("clean up", { removed });
  }
}

function createVerifier(
  ctx: HostContext,
  forkRec: EnvironmentRecord,
  vplan: VerifierPlan,
  image: ImageRecord,
  version: string,
  command: string,
  egressEnv: Record<string, string>,
): Promise<string> {
  return ctx.docker.containers.create(
    verifierContainerSpec({
      verifier: vplan,
      image: image.imageId,
      containerName: ctx.dockerName(
        forkRec.project,
        forkRec.name,
        `verifier-${randomBytes(2).toString("hex")}`,
      ),
      networkName: vplan.services === false ? "none" : forkRec.network.name,
      workingDir: TESTS_DIR,
      env: { REWARD_DIR, SUBMISSION_DIR, ...egressEnv },
      labels: ctx.labels(forkRec, "verifier", command, { version }),
    }),
  );
}

/** A fresh reward directory owned by the verifier; tests and submission readable, not its own. */
async function prepareVerifier(
  ctx: HostContext,
  verifierId: string,
  vplan: VerifierPlan,
  testsTar: string | undefined,
  submission: Submission,
): Promise<void> {
  const { uid, gid } = await resolveIds(ctx.docker, verifierId, vplan.user);
  const parents = [...new Set(submission.archives.map((a) => a.dir))].flatMap((d) =>
    d
      .split("/")
      .filter(Boolean)
      .map((_, i, parts) => ({
        name: parts.slice(0, i + 1).join("/"),
        type: "directory" as const,
        mode: 0o755,
      })),
  );
  const dirs = await packEntries([
    { name: "logs", type: "directory", mode: 0o755 },
    { name: "logs/verifier", type: "directory", mode: 0o755, uid, gid },
    { name: "tests", type: "directory", mode: 0o755 },
    { name: "submission", type: "directory", mode: 0o755 },
    ...parents,
  ]);
  await ctx.docker.containers.putArchive(verifierId, "/", dirs);
  if (testsTar) await ctx.docker.containers.putArchive(verifierId, TESTS_DIR, createReadStream(testsTar));
  for (const a of submission.archives) {
    await ctx.docker.containers.putArchive(verifierId, a.dir, createReadStream(a.path));
  }
}

async function runVerifier(
  ctx: HostContext,
  verifierId: string,
  timeoutSec: number,
): Promise<{ exitCode: number; timedOut: boolean; log: string }> {
  await ctx.docker.containers.start(verifierId);
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    void ctx.docker.containers.kill(verifierId);
  }, timeoutSec * 1000);
  const exitCode = await ctx.docker.containers.wait(verifierId).finally(() => clearTimeout(timer));
  const logs = await ctx.docker.containers.logs(verifierId, 1000);
  return { exitCode, timedOut, log: logs.stdout.toString("utf8") + logs.stderr.toString("utf8") };
}
