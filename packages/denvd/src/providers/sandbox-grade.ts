import { createReadStream } from "node:fs";
import { posix } from "node:path";
import type { Readable } from "node:stream";
import { DenvError, ProviderMessages, type SubmissionEntry, type VerifierPlan } from "@denv/spec";
import type { RawExecResult } from "../exec-runner.js";
import type { GuardedArchive } from "../files/tar-guard.js";
import type { ExecOptions } from "../runtime/environment-exec.js";
import { parseReward, REWARD_DIR, REWARD_FILES } from "../runtime/reward.js";
import { SUBMISSION_DIR } from "../runtime/submission.js";
import { TESTS_DIR } from "../runtime/verify-environment.js";
import { shellQuote } from "./e2b/sandbox-exec.js";
import { lookupUser, type SandboxUser } from "./e2b/sandbox-user.js";

/**
 * Protection 2 in a provider's sandbox that runs calls as any user of its image (E2B's, Prime's):
 * the verifier grades as its own uid, the tests and the reward directory that uid's alone (mode
 * 0700), the submission copied through the special-file check into /submission (root's,
 * readable). What each provider does to read, write and run in its sandbox is a `SandboxOps`.
 */

const ROOT: SandboxUser = { name: "root", uid: 0 };

/** How the grade reaches one sandbox of a provider. */
export interface SandboxOps {
  /** The provider's name, as refusals say it. */
  readonly provider: string;
  /** The sandbox's /etc/passwd, read by denvd's own means as root (never a program of the image's outside it). */
  passwd(): Promise<string>;
  /** A script run as root inside the sandbox with root's PATH: its stdout; a failure is an error. */
  asRoot(script: string, env?: Record<string, string>): Promise<string>;
  /**
   * `path` packed as `user` and checked (protection 3) into a temporary file on this host.
   *
   * @throws DenvError `not_found` when there is no such path; `special_file` for a special file.
   */
  readArchive(user: SandboxUser, path: string): Promise<GuardedArchive>;
  /** An archive checked again and extracted into directory `dir` as `user`. */
  putFiles(user: SandboxUser, dir: string, archive: Readable): Promise<{ entries: number; bytes: number }>;
  /** A command with the exec contract, as `user` in `cwd`. */
  exec(user: SandboxUser, cwd: string, o: ExecOptions): Promise<RawExecResult>;
  /** A file's text read as `user`; undefined when there is no such file. */
  readText(user: SandboxUser, path: string): Promise<string | undefined>;
}

/** Exit code of readTextAs's script when the file is not there. */
const NO_FILE = 3;

/**
 * A file's text read by `cat` run through `run` (as the user it runs as, where the provider's
 * file API takes no user); undefined when there is no such file; another failure is a `docker`
 * error naming the path and the command's stderr.
 */
export async function readTextAs(
  run: (argv: string[]) => Promise<{ exitCode: number; stdout: Buffer; stderr: Buffer }>,
  provider: string,
  path: string,
): Promise<string | undefined> {
  const r = await run(["/bin/sh", "-c", `[ -f "$1" ] || exit ${NO_FILE}; cat -- "$1"`, "sh", path]);
  if (r.exitCode === NO_FILE) return undefined;
  if (r.exitCode !== 0)
    throw new DenvError("docker", `${provider}: reading ${path}: ${r.stderr.toString().trim()}`);
  return r.stdout.toString("utf8");
}

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
  ops: SandboxOps,
  paths: readonly string[],
): Promise<CollectedSubmission> {
  const out: CollectedSubmission["paths"] = [];
  const cleanup = async () => {
    for (const a of out) if ("archive" in a) await a.archive.cleanup();
  };
  try {
    for (const path of paths) {
      try {
        const archive = await ops.readArchive(ROOT, path);
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
 * Grades in a sandbox (the fork's, or the verifier's own): the verifier's user resolved (never
 * root, never the agent's uid when they share the sandbox), fresh /tests, /logs/verifier and
 * /submission made by root, the collected submission placed (checked again on the way in), the
 * tests put in, the verifier's command run as its user in /tests with the plan's timeout, and
 * the reward read as that user.
 */
export async function gradeInSandbox(
  ops: SandboxOps,
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
  const user = lookupUser(await ops.passwd(), v.user, ops.provider);
  if (user.uid === 0 || user.uid === o.agentUid) {
    throw new DenvError(
      "invalid_request",
      ProviderMessages.unsupportedOption(
        ops.provider,
        `verifier user '${v.user}'`,
        `it is uid ${user.uid} in the sandbox, ${user.uid === 0 ? "root" : "the agent's"}: the verifier runs as a principal of its own`,
      ),
    );
  }
  const own = [TESTS_DIR, REWARD_DIR].map(shellQuote).join(" ");
  await ops.asRoot(
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
        : { path: a.path, ...(await ops.putFiles(ROOT, a.into, createReadStream(a.archive.path))) },
    );
  }
  if (o.testsTar) await ops.putFiles(ROOT, TESTS_DIR, createReadStream(o.testsTar));
  // Readable by the verifier whatever modes the agent gave; the tests its own and no one else's.
  await ops.asRoot(
    `set -e; chmod -R a+rX -- ${shellQuote(SUBMISSION_DIR)}; chown -R ${user.uid} -- ${shellQuote(TESTS_DIR)}; chmod 700 -- ${shellQuote(TESTS_DIR)}`,
  );
  const ready = Date.now();
  const command = typeof v.command === "string" ? { shell: v.command } : { cmd: [...v.command] };
  const run = await ops.exec(user, TESTS_DIR, {
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
    reward: run.timedOut ? undefined : await readReward(ops, user),
  };
}

/** reward.json or reward.txt in the reward directory, read as the verifier's user. */
async function readReward(ops: SandboxOps, user: SandboxUser): Promise<SandboxGrade["reward"]> {
  for (const name of REWARD_FILES) {
    const text = await ops.readText(user, `${REWARD_DIR}/${name}`);
    if (text !== undefined) return parseReward(name, text);
  }
  return undefined;
}
