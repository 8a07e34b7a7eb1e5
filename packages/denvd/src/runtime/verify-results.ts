import type { HostVerifyResult, VerifierPlan } from "@denv/spec";
import { DenvError } from "@denv/spec";
import { REWARD_DIR } from "./reward.js";

/**
 * The parts of a verify's result every runtime builds the same way (denvd's own in
 * verify-environment.ts, a bridge's in providers/): the refusal of a submission with a special
 * file, why an ungraded run got 0, and the smoke verify's rule on its version's project.
 */

type Outcome = Pick<HostVerifyResult, "version" | "fork" | "snapshot">;
type EpisodeEvidence = Pick<HostVerifyResult["evidence"], "agent" | "snapshot" | "fork">;

/** Protection 3 stopped the episode before the verifier ran: reward 0, the check's message. */
export function refusedSubmission(
  err: DenvError,
  vplan: VerifierPlan,
  outcome: Outcome,
  episode: EpisodeEvidence,
  totalMs: number,
): HostVerifyResult {
  return {
    status: "refused",
    reward: 0,
    rewards: {},
    message: err.message,
    log: "",
    ...outcome,
    evidence: {
      ...episode,
      submission: [],
      verifier: {
        container_id: "",
        image: "",
        user: vplan.user,
        exit_code: null,
        timed_out: false,
        duration_ms: 0,
      },
      timings: { total_ms: totalMs },
    },
  };
}

/** Why a verifier that wrote no reward got 0. */
export function ungradedMessage(run: { timedOut: boolean; exitCode: number }, timeoutSec: number): string {
  return run.timedOut
    ? `the verifier did not finish within ${timeoutSec} s`
    : `the verifier exited ${run.exitCode} without writing ${REWARD_DIR}/reward.json or reward.txt`;
}

/** A smoke verify grades a version of the environment's own project. */
export function checkSmokeVersion(version: { id: string; project: string }, project: string): void {
  if (version.project !== project)
    throw new DenvError(
      "invalid_request",
      `version ${version.id} is not of project ${project}: a smoke verify grades a version of its own project`,
    );
}

/** An environment without x-denv.verifier cannot be verified. */
export function noVerifier(envId: string): DenvError {
  return new DenvError(
    "invalid_request",
    `environment ${envId} declares no verifier: add x-denv.verifier to its compose file`,
  );
}

/** A verifier's run in a provider's sandbox, as a bridge's verify grades it. */
export interface SandboxGradeRun {
  submission: HostVerifyResult["evidence"]["submission"];
  exitCode: number;
  timedOut: boolean;
  log: string;
  durationMs: number;
  prepareMs: number;
  reward: { reward: number; rewards: Record<string, number> } | undefined;
}

/**
 * A bridge's verify result from its grade: graded with the reward, or failed with why when the
 * verifier wrote none; the evidence with the episode's, the verifier's and each step's time
 * (`times`: when the verify began, the agent was stopped, the snapshot taken and the fork made).
 */
export function sandboxVerifyResult(o: {
  grade: SandboxGradeRun;
  vplan: VerifierPlan;
  outcome: Outcome;
  episode: EpisodeEvidence;
  verifier: HostVerifyResult["evidence"]["verifier"];
  times: { t0: number; stopped: number; snapshot: number; forked: number; agentStopped: boolean };
}): HostVerifyResult {
  const { grade, times: t } = o;
  const evidence: HostVerifyResult["evidence"] = {
    ...o.episode,
    submission: grade.submission,
    verifier: o.verifier,
    timings: {
      ...(t.agentStopped ? { stop_agent_ms: t.stopped - t.t0, snapshot_ms: t.snapshot - t.stopped } : {}),
      fork_ms: t.forked - t.snapshot,
      prepare_ms: grade.prepareMs,
      run_ms: grade.durationMs,
      total_ms: Date.now() - t.t0,
    },
  };
  if (!grade.reward) {
    const message = ungradedMessage(grade, o.vplan.timeoutSec);
    return { status: "failed", reward: 0, rewards: {}, message, log: grade.log, ...o.outcome, evidence };
  }
  return { status: "graded", ...grade.reward, log: grade.log, ...o.outcome, evidence };
}
