import { randomBytes } from "node:crypto";
import { createReadStream } from "node:fs";
import { posix } from "node:path";
import {
  DenvError,
  type EgressProbe,
  type HostVerifyResult,
  labelsFor,
  ProviderMessages,
  type SubmissionEntry,
  type VerifierPlan,
  type Version,
} from "@denv/spec";
import { noPhases } from "../../runtime/phase-listener.js";
import { parseReward, REWARD_DIR, REWARD_FILES } from "../../runtime/reward.js";
import { SUBMISSION_DIR } from "../../runtime/submission.js";
import { TESTS_DIR, type VerifyOptions } from "../../runtime/verify-environment.js";
import {
  checkSmokeVersion,
  noVerifier,
  refusedSubmission,
  sandboxVerifyResult,
} from "../../runtime/verify-results.js";
import { shellQuote } from "../e2b/sandbox-exec.js";
import { execInDaytona, runScript, runTool } from "./daytona-exec.js";
import { putDaytonaFiles, readDaytonaArchive } from "./daytona-files.js";
import { type DaytonaHost, PROVIDER, provider } from "./daytona-host.js";
import { probeEgress, startService, waitHealthy } from "./daytona-materialize.js";
import type { DaytonaEnvironmentRecord, DaytonaVersionRecord } from "./daytona-records.js";
import type { DaytonaSandbox } from "./daytona-sdk.js";

/** What the Daytona verify needs of its runtime: the steps of an episode. */
export interface DaytonaEpisode {
  host: DaytonaHost;
  environment(envId: string): Promise<{ rec: DaytonaEnvironmentRecord; sbx: DaytonaSandbox }>;
  /** Stops the environment's sandbox (Daytona's stop: every process in it ends). */
  stop(envId: string): Promise<unknown>;
  /** Starts it again, its service and probe as after a deploy. */
  start(envId: string): Promise<unknown>;
  snapshot(envId: string, opts: { command: string; number?: number | undefined }): Promise<Version>;
  version(versionId: string): Promise<Version>;
  versionRecord(versionId: string): Promise<DaytonaVersionRecord>;
}

/** A user of the sandbox: its uid and primary gid, and whether /etc/passwd names it (it has groups then). */
interface PasswdUser {
  name: string;
  uid: number;
  gid: number;
  named: boolean;
}

/**
 * Protection 2 on Daytona, whose sandboxes have one OS user each (its toolbox has no per-command
 * user). The agent is stopped by stopping its sandbox: Daytona ends every process in it, the
 * agent's whatever it did to hide them. The stopped sandbox's filesystem is the version (a
 * Daytona snapshot). The verifier grades in a new sandbox from that snapshot whose one user is
 * root: root makes /tests, /logs/verifier and /submission; the service's command runs again as
 * the agent's uid, and the verifier as its own uid (never the agent's), each through `setpriv`
 * with no new privileges. That `setpriv` is the image's, inside the sandbox: the agent, never
 * root, could not replace it. The episode's sandbox is started again afterwards, its service and
 * probe as after a deploy, while the verifier runs.
 */
export async function verifyOnDaytona(
  episode: DaytonaEpisode,
  envId: string,
  opts: VerifyOptions = {},
): Promise<HostVerifyResult> {
  const phase = opts.onPhase ?? noPhases;
  const { rec, sbx } = await episode.environment(envId);
  const vplan = rec.plan.verifier;
  if (!vplan) throw noVerifier(envId);
  if (opts.keepFork) {
    throw new DenvError(
      "invalid_request",
      ProviderMessages.unsupportedOption(
        PROVIDER,
        "keeping the verify's fork",
        "its sandbox's one user is root, for the verifier's setup: it is never handed to the agent",
      ),
    );
  }
  const command = opts.command ?? `verify-${randomBytes(4).toString("hex")}`;
  const t0 = Date.now();
  let agent: { killed: number; survivors: number } | undefined;
  let version: Version;
  let tStopped = t0;
  let restarting: Promise<unknown> | undefined;
  if (opts.smokeVersion !== undefined) {
    version = await episode.version(opts.smokeVersion);
    checkSmokeVersion(version, rec.project);
    phase.start("fork");
  } else {
    phase.start("stop agent");
    const before = await provider(() => runScript(sbx, "ls -d /proc/[0-9]* | wc -l"));
    await episode.stop(envId);
    // The listing's own shell and ls were among them.
    agent = { killed: Math.max(0, Number(before.output.trim()) - 2), survivors: 0 };
    tStopped = Date.now();
    phase.end("stop agent", agent, "snapshot");
    version = await episode.snapshot(envId, { command, number: opts.number });
    // The grade does not wait for it, nor fail with it: the environment stays stopped then, and
    // a start (denv env start) tries again.
    restarting = episode
      .start(envId)
      .catch((e: unknown) => episode.host.log(`${envId}: not started again after its verify: ${String(e)}`));
  }
  const tSnap = Date.now();
  const snapshot = {
    version: version.id,
    method: version.method,
    // The sandbox was stopped, not frozen: nothing ran while Daytona took its filesystem.
    frozen_ms: 0,
    total_ms: version.timings.total_ms ?? tSnap - tStopped,
  };
  if (agent) phase.end("snapshot", snapshot, "fork");
  const vrec = await episode.versionRecord(version.id);
  const forkId = `${rec.project}/verify-${randomBytes(3).toString("hex")}`;
  const fork = await verifySandbox(episode.host, vrec, forkId, command);
  const tForked = Date.now();
  phase.end("fork", { environment: forkId, services: "started" }, "probe");
  phase.end("probe", fork.probe);
  const episodeEvidence = {
    ...(agent ? { agent } : {}),
    snapshot,
    fork: { environment: forkId, probe: fork.probe },
  };
  const outcome = { version: version.id, fork: forkId, snapshot: version };
  try {
    phase.start("run verifier");
    let grade: Awaited<ReturnType<typeof gradeInDaytona>>;
    try {
      grade = await gradeInDaytona(fork.sbx, vplan, fork.agent, vrec.testsTar);
    } catch (err) {
      if (!(err instanceof DenvError && err.code === "special_file")) throw err;
      return refusedSubmission(err, vplan, outcome, episodeEvidence, Date.now() - t0);
    }
    const verifier = {
      container_id: fork.sbx.id,
      image: vrec.snapshot,
      user: vplan.user,
      exit_code: grade.timedOut ? null : grade.exitCode,
      timed_out: grade.timedOut,
      duration_ms: grade.durationMs,
      isolation: `daytona: a sandbox of its own ${fork.sbx.id} from the version's snapshot, as uid ${grade.user.uid} (${grade.user.name}); the service as the agent's uid ${fork.agent.uid}; the agent's sandbox stopped`,
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
    await fork.release();
    await restarting;
    phase.end("clean up", { removed: [`verifier sandbox ${fork.sbx.id}`] });
  }
}

/**
 * How `user` runs a command in a sandbox whose one user is root: setpriv's argv before it (no
 * new privileges, so no setuid binary takes it back to root).
 */
function as(user: PasswdUser): string[] {
  if (user.uid === 0) return [];
  return [
    "/usr/bin/setpriv",
    `--reuid=${user.uid}`,
    `--regid=${user.gid}`,
    // Its groups from /etc/group, as the engine gives a named user (a shared database's group).
    user.named ? "--init-groups" : "--clear-groups",
    "--no-new-privs",
    "--",
  ];
}

/**
 * The verify's sandbox: from the version's snapshot, root its one user, labelled as the
 * environment's verifier, without network; the service's command started again as the agent's
 * uid and waited for; the egress probe run. `release` deletes it.
 */
async function verifySandbox(
  host: DaytonaHost,
  v: DaytonaVersionRecord,
  forkId: string,
  command: string,
): Promise<{ sbx: DaytonaSandbox; agent: PasswdUser; probe: EgressProbe; release(): Promise<void> }> {
  const own = `${command}-verifier`;
  host.inFlight.add(own);
  let sbx: DaytonaSandbox | undefined;
  try {
    sbx = await provider(() =>
      host.client.create(
        {
          snapshot: v.snapshot,
          user: "root",
          labels: labelsFor({
            host: host.hostId,
            project: v.project,
            environment: forkId,
            role: "verifier",
            command: own,
          }),
          networkBlockAll: true,
          autoStopInterval: 0,
          autoArchiveInterval: 0,
          autoDeleteInterval: -1,
        },
        { timeout: 0 },
      ),
    );
    const made = sbx;
    const passwd = (await provider(() => made.fs.downloadFile("/etc/passwd"))).toString("utf8");
    const agent = passwdUser(passwd, String(v.agentUid)) ?? {
      name: String(v.agentUid),
      uid: v.agentUid,
      gid: v.agentUid,
      named: false,
    };
    const service = v.plan.services[0];
    if (service) {
      await startService(made, service, as(agent));
      await waitHealthy(made, service, as(agent));
    }
    const probe = await probeEgress(host, made, v.plan.agent.service, as(agent));
    if (!probe.ok)
      throw new DenvError("egress_leak", probe.findings[0] ?? "the verify's sandbox is not isolated");
    const release = async () => {
      await provider(() => made.delete()).finally(() => host.inFlight.delete(own));
    };
    return { sbx: made, agent, probe, release };
  } catch (err) {
    await sbx?.delete().catch(() => undefined);
    host.inFlight.delete(own);
    throw err;
  }
}

/** `user` (a name or a uid) in a passwd, or undefined when it has no line there. */
function passwdUser(passwd: string, user: string): PasswdUser | undefined {
  for (const line of passwd.split("\n")) {
    const [name, , uid, gid] = line.split(":");
    if (name === undefined || uid === undefined) continue;
    if (name === user || uid === user)
      return { name, uid: Number(uid), gid: Number(gid ?? uid), named: true };
  }
  return undefined;
}

/**
 * Grades in the verify's sandbox: the verifier's user resolved (never the agent's uid), fresh
 * /tests, /logs/verifier and /submission made by root, the submission read out of the agent's
 * paths through the special-file check and placed, the tests put in, the verifier run as its
 * user in /tests with the plan's timeout, and the reward read as that user.
 */
async function gradeInDaytona(
  sbx: DaytonaSandbox,
  v: VerifierPlan,
  agent: PasswdUser,
  testsTar: string | undefined,
) {
  const started = Date.now();
  const passwd = (await provider(() => sbx.fs.downloadFile("/etc/passwd"))).toString("utf8");
  const numeric = /^\d+$/.test(v.user)
    ? { name: v.user, uid: Number(v.user), gid: Number(v.user), named: false }
    : undefined;
  const user = passwdUser(passwd, v.user) ?? numeric;
  if (!user) throw new DenvError("invalid_request", ProviderMessages.userWithoutName(PROVIDER, v.user));
  if (user.uid === agent.uid) {
    throw new DenvError(
      "invalid_request",
      ProviderMessages.unsupportedOption(
        PROVIDER,
        `verifier user '${v.user}'`,
        `it is uid ${user.uid} in the sandbox, the agent's: the verifier runs as a principal of its own`,
      ),
    );
  }
  const own = [TESTS_DIR, REWARD_DIR].map(shellQuote).join(" ");
  await root(
    sbx,
    [
      "set -e",
      `rm -rf -- ${own} ${shellQuote(SUBMISSION_DIR)}`,
      `mkdir -p -- ${own} ${shellQuote(SUBMISSION_DIR)}`,
      `chown ${user.uid}:${user.gid} -- ${own}`,
      `chmod 700 -- ${own}`,
      `chmod 755 -- ${shellQuote(posix.dirname(REWARD_DIR))} ${shellQuote(SUBMISSION_DIR)}`,
    ].join("; "),
  );
  const submission: SubmissionEntry[] = [];
  for (const path of v.submission) {
    let archive: Awaited<ReturnType<typeof readDaytonaArchive>>;
    try {
      archive = await readDaytonaArchive(sbx, path);
    } catch (e) {
      if (!(e instanceof DenvError && e.code === "not_found")) throw e;
      submission.push({ path, missing: true });
      continue;
    }
    try {
      const into = posix.join(SUBMISSION_DIR, posix.dirname(posix.normalize(path)));
      submission.push({ path, ...(await putDaytonaFiles(sbx, into, createReadStream(archive.path))) });
    } finally {
      await archive.cleanup();
    }
  }
  if (testsTar) await putDaytonaFiles(sbx, TESTS_DIR, createReadStream(testsTar));
  await root(
    sbx,
    `set -e; chmod -R a+rX -- ${shellQuote(SUBMISSION_DIR)}; chown -R ${user.uid}:${user.gid} -- ${shellQuote(TESTS_DIR)}; chmod 700 -- ${shellQuote(TESTS_DIR)}`,
  );
  const ready = Date.now();
  const argv = typeof v.command === "string" ? ["sh", "-c", v.command] : [...v.command];
  const run = await execInDaytona(sbx, TESTS_DIR, {
    cmd: [...as(user), ...argv],
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
    reward: run.timedOut ? undefined : await readReward(sbx, user),
  };
}

/** A script as root (the verify sandbox's one user); a failure names its output. */
async function root(sbx: DaytonaSandbox, script: string): Promise<void> {
  const r = await provider(() => runTool(sbx, `${script} 2>&1`));
  if (r.exitCode !== 0)
    throw new DenvError("docker", `${PROVIDER}: preparing the verifier failed: ${r.output.trim()}`);
}

/** reward.json or reward.txt in the reward directory, read as the verifier's user. */
async function readReward(sbx: DaytonaSandbox, user: PasswdUser) {
  for (const name of REWARD_FILES) {
    const cat = [...as(user), "cat", "--", `${REWARD_DIR}/${name}`].map(shellQuote).join(" ");
    const r = await provider(() => runTool(sbx, `${cat} 2>/dev/null`));
    if (r.exitCode !== 0) continue;
    return parseReward(name, r.output);
  }
  return undefined;
}
