import { randomBytes } from "node:crypto";
import { createReadStream } from "node:fs";
import { posix } from "node:path";
import { DenvError, labelsFor } from "@denv/spec";
import tar from "tar-stream";
import { guardTar } from "./files/tar-guard.js";
import { packEntries } from "./files/tar-pack.js";
import { readAll } from "./files-api.js";
import type { EnvironmentInfo, PhaseListener, Runtime, VersionInfo } from "./runtime.js";
import { snapshotEnvironment } from "./snapshotter.js";

/**
 * Protection 2: grading as a separate principal, after the agent stops, on a fork. The
 * verifier's own container (own image, own non-root uid, the tests copied only there, a fresh
 * reward directory) joins the fork's network and receives the submission paths copied out of
 * the fork after the special-file check (protection 3).
 */

export interface VerifyResult {
  /** graded: the verifier wrote a reward; refused: a submission path held a special file
   * (reward 0); failed: the verifier wrote no reward or timed out (reward 0). */
  status: "graded" | "refused" | "failed";
  reward: number;
  rewards: Record<string, number>;
  message?: string;
  log: string;
  version: string;
  fork: string;
  evidence: {
    agent: { killed: number; survivors: number };
    snapshot: { version: string; frozenMs: number; totalMs: number; method: string };
    fork: { environment: string; probe: unknown };
    submission: Array<{ path: string; entries: number; bytes: number } | { path: string; missing: true }>;
    verifier: {
      containerId: string;
      image: string;
      user: string;
      exitCode: number | null;
      timedOut: boolean;
      durationMs: number;
    };
    timings: Record<string, number>;
  };
}

export const REWARD_DIR = "/logs/verifier";
export const TESTS_DIR = "/tests";
export const SUBMISSION_DIR = "/submission";

export async function verifyEnvironment(
  rt: Runtime,
  envId: string,
  opts: { command?: string; keepFork?: boolean; onPhase?: PhaseListener; number?: number } = {},
): Promise<VerifyResult> {
  const phase = opts.onPhase ?? (() => undefined);
  const rec = await rt.requireEnvironment(envId);
  const vplan = rec.plan.verifier;
  if (!vplan || !rec.verifierImage) {
    throw new DenvError(
      "invalid_request",
      `environment ${envId} declares no verifier: add x-denv.verifier to its compose file`,
    );
  }
  const command = opts.command ?? `verify-${randomBytes(4).toString("hex")}`;
  const t0 = Date.now();
  phase("stop agent");
  const agent = await rt.stopAgent(envId);
  const tStopped = Date.now();
  phase("snapshot", { agent });
  const version: VersionInfo = await snapshotEnvironment(rt, envId, {
    command,
    ...(opts.number !== undefined ? { number: opts.number } : {}),
  });
  phase("fork", { version: version.id });
  const tSnap = Date.now();
  const fork: EnvironmentInfo = await rt.fork(version.id, {
    name: `verify-${randomBytes(3).toString("hex")}`,
    command,
  });
  const tForked = Date.now();
  phase("probe", { fork: fork.id, probe: fork.evidence.probe });
  const forkRec = await rt.requireEnvironment(fork.id);
  // What every outcome reports: the agent stopped, the episode's snapshot, the fork it ran on.
  const episodeEvidence = {
    agent,
    snapshot: {
      version: version.id,
      frozenMs: version.timings.frozenMs,
      totalMs: version.timings.totalMs,
      method: version.method,
    },
    fork: { environment: fork.id, probe: fork.evidence.probe },
  };
  let verifierId = "";
  try {
    // Submission: copied out of the fork (the agent's disk state) and checked before the
    // verifier sees a byte of it.
    phase("run verifier");
    const agentContainer = forkRec.containers[rec.plan.agent.service] as string;
    const submission: VerifyResult["evidence"]["submission"] = [];
    const archives: Array<{ dir: string; path: string; cleanup: () => Promise<void> }> = [];
    try {
      for (const path of vplan.submission) {
        let raw: NodeJS.ReadableStream;
        try {
          raw = await rt.docker.getArchive(agentContainer, path);
        } catch (err) {
          if (err instanceof DenvError && err.code === "not_found") {
            submission.push({ path, missing: true });
            continue;
          }
          throw err;
        }
        try {
          const guarded = await guardTar(raw as NodeJS.ReadableStream, { displayRoot: posix.dirname(path) });
          archives.push({
            dir: posix.join(SUBMISSION_DIR, posix.dirname(path)),
            path: guarded.path,
            cleanup: guarded.cleanup,
          });
          submission.push({ path, entries: guarded.entries, bytes: guarded.bytes });
        } catch (err) {
          if (err instanceof DenvError && err.code === "special_file") {
            return refusedResult(err.message);
          }
          throw err;
        }
      }

      const [uid = "1001", gid = uid] = vplan.user.split(":");
      verifierId = await rt.docker.createContainer({
        name: rt.dockerName(forkRec.project, forkRec.name, `verifier-${randomBytes(2).toString("hex")}`),
        Image: rec.verifierImage.imageId,
        Cmd: typeof vplan.command === "string" ? ["sh", "-c", vplan.command] : vplan.command,
        User: vplan.user,
        WorkingDir: TESTS_DIR,
        Env: Object.entries({ REWARD_DIR, SUBMISSION_DIR, ...vplan.environment }).map(
          ([k, v]) => `${k}=${v}`,
        ),
        Labels: labelsFor({
          host: rt.options.hostId,
          project: forkRec.project,
          environment: forkRec.id,
          version: version.id,
          role: "verifier",
          command,
        }),
        HostConfig: {
          NetworkMode: forkRec.network.name,
          Memory: vplan.resources.memoryBytes,
          MemorySwap: vplan.resources.memoryBytes,
          NanoCpus: Math.round(vplan.resources.cpus * 1e9),
          PidsLimit: vplan.resources.pids,
          CapDrop: ["ALL"],
          SecurityOpt: ["no-new-privileges:true"],
          DnsOptions: ["timeout:1", "attempts:1"],
        },
      });
      // A fresh reward directory owned by the verifier; tests and submission readable, not its own.
      const dirs = await packEntries([
        { name: "logs", type: "directory", mode: 0o755 },
        { name: "logs/verifier", type: "directory", mode: 0o755, uid: Number(uid), gid: Number(gid) },
        { name: "tests", type: "directory", mode: 0o755 },
        { name: "submission", type: "directory", mode: 0o755 },
        ...[...new Set(archives.map((a) => a.dir))].flatMap((d) =>
          d
            .split("/")
            .filter(Boolean)
            .map((_, i, parts) => ({
              name: parts.slice(0, i + 1).join("/"),
              type: "directory" as const,
              mode: 0o755,
            })),
        ),
      ]);
      await rt.docker.putArchive(verifierId, "/", dirs);
      if (rec.testsTar) await rt.docker.putArchive(verifierId, TESTS_DIR, createReadStream(rec.testsTar));
      for (const a of archives) await rt.docker.putArchive(verifierId, a.dir, createReadStream(a.path));
      const tReady = Date.now();

      await rt.docker.start(verifierId);
      let timedOut = false;
      const timer = setTimeout(() => {
        timedOut = true;
        void rt.docker.kill(verifierId);
      }, vplan.timeoutSec * 1000);
      const exitCode = await rt.docker.wait(verifierId).finally(() => clearTimeout(timer));
      const tRan = Date.now();
      phase("collect");
      const logs = await rt.docker.logs(verifierId, 1000);
      const log = logs.stdout.toString("utf8") + logs.stderr.toString("utf8");
      const reward = timedOut ? undefined : await readReward(rt, verifierId);
      const evidence: VerifyResult["evidence"] = {
        ...episodeEvidence,
        submission,
        verifier: {
          containerId: verifierId,
          image: rec.verifierImage.imageId,
          user: vplan.user,
          exitCode: timedOut ? null : exitCode,
          timedOut,
          durationMs: tRan - tReady,
        },
        timings: {
          stopAgentMs: tStopped - t0,
          snapshotMs: tSnap - tStopped,
          forkMs: tForked - tSnap,
          prepareMs: tReady - tForked,
          runMs: tRan - tReady,
          totalMs: Date.now() - t0,
        },
      };
      if (!reward) {
        return {
          status: "failed",
          reward: 0,
          rewards: {},
          message: timedOut
            ? `the verifier did not finish within ${vplan.timeoutSec} s`
            : `the verifier exited ${exitCode} without writing ${REWARD_DIR}/reward.json or reward.txt`,
          log,
          version: version.id,
          fork: fork.id,
          evidence,
        };
      }
      return { status: "graded", ...reward, log, version: version.id, fork: fork.id, evidence };
    } finally {
      for (const a of archives) await a.cleanup();
    }

    function refusedResult(message: string): VerifyResult {
      return {
        status: "refused",
        reward: 0,
        rewards: {},
        message,
        log: "",
        version: version.id,
        fork: fork.id,
        evidence: {
          ...episodeEvidence,
          submission: [],
          verifier: {
            containerId: "",
            image: "",
            user: vplan?.user ?? "",
            exitCode: null,
            timedOut: false,
            durationMs: 0,
          },
          timings: { totalMs: Date.now() - t0 },
        },
      };
    }
  } finally {
    phase("clean up");
    if (verifierId) await rt.docker.removeContainer(verifierId);
    if (!opts.keepFork) await rt.destroy(fork.id);
  }
}

/** reward.json (an object of numbers; "reward" is the main one) or reward.txt (one float). */
async function readReward(
  rt: Runtime,
  containerId: string,
): Promise<{ reward: number; rewards: Record<string, number> } | undefined> {
  for (const name of ["reward.json", "reward.txt"]) {
    const body = await readOne(rt, containerId, `${REWARD_DIR}/${name}`);
    if (body === undefined) continue;
    const text = body.toString("utf8").trim();
    if (name === "reward.txt") {
      const value = Number(text);
      if (!Number.isFinite(value))
        throw new DenvError("verifier_failed", `reward.txt does not hold a number: '${text.slice(0, 80)}'`);
      return { reward: value, rewards: { reward: value } };
    }
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      throw new DenvError("verifier_failed", "reward.json is not valid JSON");
    }
    if (typeof parsed === "number") return { reward: parsed, rewards: { reward: parsed } };
    if (!parsed || typeof parsed !== "object")
      throw new DenvError("verifier_failed", "reward.json must hold an object of numbers");
    const rewards: Record<string, number> = {};
    for (const [k, v] of Object.entries(parsed)) if (typeof v === "number") rewards[k] = v;
    const values = Object.values(rewards);
    const main = rewards.reward ?? (values.length === 1 ? values[0] : undefined);
    if (main === undefined) throw new DenvError("verifier_failed", "reward.json has no numeric 'reward' key");
    return { reward: main, rewards };
  }
  return undefined;
}

async function readOne(rt: Runtime, containerId: string, path: string): Promise<Buffer | undefined> {
  let archive: NodeJS.ReadableStream;
  try {
    archive = await rt.docker.getArchive(containerId, path);
  } catch (err) {
    if (err instanceof DenvError && err.code === "not_found") return undefined;
    throw err;
  }
  const extract = tar.extract();
  let found: Buffer | undefined;
  extract.on("entry", (header, stream, next) => {
    void readAll(stream).then((b) => {
      if (header.type === "file" && found === undefined) found = b;
      next();
    });
  });
  (archive as NodeJS.ReadableStream).pipe(extract);
  await new Promise<void>((resolve, reject) => {
    extract.on("finish", () => resolve());
    extract.on("error", reject);
  });
  return found;
}
