import { createReadStream } from "node:fs";
import { posix } from "node:path";
import { DenvError, ProviderMessages, type SubmissionEntry, type VerifierPlan } from "@denv/spec";
import type { GuardedArchive } from "../../files/tar-guard.js";
import { parseReward, REWARD_DIR, REWARD_FILES } from "../../runtime/reward.js";
import { SUBMISSION_DIR } from "../../runtime/submission.js";
import { TESTS_DIR } from "../../runtime/verify-environment.js";
import { PROVIDER } from "./check-plan.js";
import { type E2bSandbox, loadE2b } from "./e2b-sdk.js";
import { execInSandbox, shellQuote } from "./sandbox-exec.js";
import { putSandboxFiles, readSandboxArchive } from "./sandbox-files.js";
import { asRoot } from "./sandbox-processes.js";
import { resolveSandboxUser, type SandboxUser } from "./sandbox-user.js";

/**
 * Protection 2 in E2B sandboxes. They share no network, so a verifier that reaches the fork's
 * services runs in the fork's sandbox, as its own uid, after the agent's processes were killed in
 * the episode's sandbox (before the snapshot): the tests and the reward directory are that uid's
 * alone (mode 0700), the submission is copied through the special-file check into /submission
 * (root's, readable), and the fork's services keep running as they did in the episode. What this
 * does not give, and denvd's own runtime does: an image of the verifier's own, a kernel and /tmp
 * not shared with the services. A verifier that reads only files gets all of that: a sandbox of
 * its own from its own template, where the same steps place the submission and the tests.
 */

const ROOT: SandboxUser = { name: "root", uid: 0 };

export interface SandboxGrade {
  user: SandboxUser;
  submission: SubmissionEntry[];
  exitCode: number;
  timedOut: boolean;
  log: string;
  durationMs: number;
  prepareMs: number;
  reward: { reward: number; rewards: Record<string, number> } | undefined;
}

/** The submission paths read out of the fork and checked (protection 3), before any is placed. */
export interface CollectedSubmission {
  paths: Array<{ path: string; missing: true } | { path: string; into: string; archive: GuardedArchive }>;
  /** Removes the checked archives (temporary files on this host). */
  cleanup(): Promise<void>;
}

/**
 * Reads each submission path out of the fork's sandbox as root, through the special-file check,
 * into a checked archive on this host (a file: a submission is not held in memory); a path that
 * is not there is reported missing.
 *
 * @throws DenvError `special_file` when a path holds one (nothing was placed, nothing is kept).
 */
export async function collectSubmission(
  sbx: E2bSandbox,
  paths: readonly string[],
): Promise<CollectedSubmission> {
  const out: CollectedSubmission["paths"] = [];
  const cleanup = async () => {
    for (const a of out) if ("archive" in a) await a.archive.cleanup();
  };
  try {
    for (const path of paths) {
      try {
        const archive = await readSandboxArchive(sbx, ROOT, path);
        out.push({ path, into: posix.join(SUBMISSION_DIR, posix.dirname(posix.normalize(path))), archive });
      } catch (e) {
        if (!(e instanceof DenvError && e.code === "not_found")) throw e;
        out.push({ path, missing: true });
      }
    }
  } catch (e) {
    await cleanup();
    throw e;
  }
  return { paths: out, cleanup };
}

/**
 * Grades in `sbx` (the fork's sandbox, or the verifier's own): the verifier's user resolved
 * (never root, never the agent's uid when they share the sandbox), fresh /tests, /logs/verifier
 * and /submission made by root, the collected submission placed (checked again on the way in),
 * the tests put in, the verifier's command run as its user in /tests with the plan's timeout, and
 * the reward read as that user.
 */
export async function gradeInSandbox(
  sbx: E2bSandbox,
  o: {
    verifier: VerifierPlan;
    /** The agent's uid when the verifier shares its sandbox. */
    agentUid: number | undefined;
    testsTar: string | undefined;
    submission: CollectedSubmission;
  },
): Promise<SandboxGrade> {
  const started = Date.now();
  const v = o.verifier;
  const user = await resolveSandboxUser(sbx, v.user);
  if (user.uid === 0 || user.uid === o.agentUid) {
    throw new DenvError(
      "invalid_request",
      ProviderMessages.unsupportedOption(
        PROVIDER,
        `verifier user '${v.user}'`,
        `it is uid ${user.uid} in the sandbox, ${user.uid === 0 ? "root" : "the agent's"}: the verifier runs as a principal of its own`,
      ),
    );
  }
  const own = [TESTS_DIR, REWARD_DIR].map(shellQuote).join(" ");
  await asRoot(
    sbx,
    [
      "set -e",
      `rm -rf -- ${own} ${shellQuote(SUBMISSION_DIR)}`,
      `mkdir -p -- ${own} ${shellQuote(SUBMISSION_DIR)}`,
      `chown ${user.uid} -- ${own}`,
      `chmod 700 -- ${own}`,
      `chmod 755 -- ${shellQuote(posix.dirname(REWARD_DIR))} ${shellQuote(SUBMISSION_DIR)}`,
    ].join("; "),
  );
  const submission: SubmissionEntry[] = [];
  for (const a of o.submission.paths) {
    submission.push(
      "missing" in a
        ? a
        : { path: a.path, ...(await putSandboxFiles(sbx, ROOT, a.into, createReadStream(a.archive.path))) },
    );
  }
  if (o.testsTar) await putSandboxFiles(sbx, ROOT, TESTS_DIR, createReadStream(o.testsTar));
  // Readable by the verifier whatever modes the agent gave; the tests its own and no one else's.
  await asRoot(
    sbx,
    `set -e; chmod -R a+rX -- ${shellQuote(SUBMISSION_DIR)}; chown -R ${user.uid} -- ${shellQuote(TESTS_DIR)}; chmod 700 -- ${shellQuote(TESTS_DIR)}`,
  );
  const ready = Date.now();
  const command = typeof v.command === "string" ? { shell: v.command } : { cmd: [...v.command] };
  const run = await execInSandbox(sbx, user, TESTS_DIR, {
    ...command,
    env: { ...v.environment, REWARD_DIR, SUBMISSION_DIR },
    timeout: v.timeoutSec,
  });
  return {
    user,
    submission,
    exitCode: run.exitCode,
    timedOut: run.timedOut,
    log: run.stdout.toString("utf8") + run.stderr.toString("utf8"),
    durationMs: run.durationMs,
    prepareMs: ready - started,
    reward: run.timedOut ? undefined : await readSandboxReward(sbx, user),
  };
}

/** reward.json or reward.txt in the reward directory, read as the verifier's user. */
async function readSandboxReward(sbx: E2bSandbox, user: SandboxUser): Promise<SandboxGrade["reward"]> {
  const { FileNotFoundError } = await loadE2b();
  for (const name of REWARD_FILES) {
    let text: string;
    try {
      text = await sbx.files.read(`${REWARD_DIR}/${name}`, { user: user.name });
    } catch (e) {
      if (e instanceof FileNotFoundError) continue;
      throw e;
    }
    return parseReward(name, text);
  }
  return undefined;
}
