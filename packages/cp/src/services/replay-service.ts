import { createHash } from "node:crypto";
import { Readable } from "node:stream";
import {
  checkName,
  DenvError,
  EPISODE_LOG,
  type EpisodeLog,
  type EpisodeOutcome,
  EpisodeStep,
  type ErrorCode,
  ErrorCodes,
  type ExecRequest,
  type ReplayList,
  ReplayMessages,
  type ReplayRequest,
  type ReplayResponse,
  type ReplayStep,
  ReplaySummary,
} from "@denv/spec";
import type { z } from "zod";
import { callFailure, type StreamCall } from "../hub/hub.js";
import { newId, nowIso, randomToken } from "../ids.js";
import type { EpisodeStepRecord } from "../store/records.js";
import type { Store } from "../store/store.js";
import type { Principal } from "./access.js";
import type { DeploymentService } from "./deployment-service.js";
import type { EnvironmentService } from "./environment-service.js";
import { digests, type EpisodeRecorder, outputBytes } from "./episode-recorder.js";

interface Kept {
  step: EpisodeStep;
  kept?: Buffer | undefined;
}

/**
 * Reads an episode's command log and replays it: the same steps, as the same users and services,
 * on a fresh fork of the version the episode started from, compared step by step (exit code and
 * output digests). The replayed fork keeps its own log and can be verified like any other.
 */
export class ReplayService {
  constructor(
    private readonly store: Store,
    private readonly environments: EnvironmentService,
    private readonly deployments: DeploymentService,
    private readonly episodes: EpisodeRecorder,
  ) {}

  /** One page of the log, readable by any token that can read the environment. */
  async log(
    p: Principal,
    project: string,
    env: string,
    q: { after?: number | undefined; limit?: number | undefined },
  ): Promise<EpisodeLog> {
    const e = await this.environments.require(p, project, env);
    const max = this.episodes.maxSteps;
    const limit = Math.min(q.limit ?? EPISODE_LOG.page.default, EPISODE_LOG.page.max);
    const rows = await this.store.listEpisodeSteps(e.id, { afterSeq: q.after ?? 0, limit, maxSeq: max });
    const steps = parsed(rows).map((k) => k.step);
    const last = await this.store.lastEpisodeSeq(e.id);
    const total = Math.min(last, max);
    const dropped = await this.dropped(e.id);
    const end = steps.at(-1)?.seq;
    return {
      environment: e.id,
      ...(e.parentVersion ? { started_from: e.parentVersion } : {}),
      total,
      dropped,
      steps,
      ...(end !== undefined && end < total && steps.length === limit ? { next: end } : {}),
    };
  }

  /** The episode's kept replays, newest first, readable by any token that can read the environment. */
  async list(p: Principal, project: string, env: string): Promise<ReplayList> {
    const e = await this.environments.require(p, project, env);
    const replays: ReplaySummary[] = [];
    for (const r of await this.store.listReplays(e.id)) {
      const steps = ReplaySummary.shape.steps.safeParse(r.steps);
      replays.push({
        id: r.id,
        environment: r.environment,
        environment_name: r.environmentName,
        fork: r.fork,
        version: r.version,
        created_at: r.createdAt,
        token_id: r.tokenId,
        diverged: r.diverged,
        ...(r.divergedAt !== undefined ? { diverged_at: r.divergedAt } : {}),
        steps: steps.success ? steps.data : [],
      });
    }
    return { replays };
  }

  private async dropped(envId: string): Promise<number> {
    const max = this.episodes.maxSteps;
    const [row] = await this.store.listEpisodeSteps(envId, { afterSeq: max, limit: 1, maxSeq: max + 1 });
    const n = (row?.data as { dropped?: unknown } | undefined)?.dropped;
    return typeof n === "number" ? n : 0;
  }

  async replay(
    p: Principal,
    project: string,
    env: string,
    req: z.output<typeof ReplayRequest>,
  ): Promise<ReplayResponse> {
    const started = Date.now();
    const e = await this.environments.require(p, project, env);
    const max = this.episodes.maxSteps;
    const steps = parsed(
      await this.store.listEpisodeSteps(e.id, { afterSeq: 0, limit: max, kept: true, maxSeq: max }),
    );
    const dropped = await this.dropped(e.id);
    if (dropped > 0)
      throw new DenvError("invalid_request", ReplayMessages.tooLong(e.id, steps.length, dropped));
    if (steps.length === 0) throw new DenvError("invalid_request", ReplayMessages.empty(e.id));
    const from = req.from ?? e.parentVersion;
    if (from === undefined) throw new DenvError("invalid_request", ReplayMessages.noVersion(e.id));
    // Everything a step needs is checked before anything is forked.
    for (const { step, kept } of steps) {
      if (step.exec) {
        if (!step.exec.stdin_kept || (step.exec.stdin_bytes > 0 && !kept))
          throw new DenvError(
            "invalid_request",
            ReplayMessages.stdinNotKept(step.seq, step.exec.stdin_bytes),
          );
        const missing = step.exec.env_keys.filter((k) => req.env?.[k] === undefined);
        if (missing.length > 0)
          throw new DenvError("invalid_request", ReplayMessages.missingEnv(step.seq, missing));
      }
      if (step.files && (!step.files.kept || (step.files.bytes > 0 && !kept)))
        throw new DenvError("invalid_request", ReplayMessages.filesNotKept(step.seq, step.files.bytes));
    }
    const name = checkName("environment", req.name ?? `replay-${randomToken(4).slice(0, 6)}`);
    const d = await this.deployments.startFork(p, project, undefined, from, name);
    const done = await this.deployments.wait(d.id);
    if (done.status !== "succeeded") {
      const code = done.error?.code ?? "internal";
      throw new DenvError(
        code in ErrorCodes ? (code as ErrorCode) : "internal",
        done.error?.message ?? `the replay's fork ${d.environment} failed`,
      );
    }
    const version = (await this.store.getEnvironment(d.environment))?.parentVersion ?? from;
    const results: ReplayStep[] = [];
    for (const k of steps) results.push(await this.replayStep(p, project, name, k, req.env ?? {}));
    const diverged = results.filter((r) => r.status === "diverged");
    await this.store.putReplay({
      id: newId("rpl"),
      environment: e.id,
      environmentName: e.name,
      fork: d.environment,
      version,
      tokenId: p.tokenId,
      diverged: diverged.length,
      ...(diverged[0] ? { divergedAt: diverged[0].seq } : {}),
      steps: results.map((r) => ({ seq: r.seq, kind: r.kind, status: r.status, differs: r.differs })),
      createdAt: nowIso(),
    });
    return {
      environment: e.id,
      version,
      fork: d.environment,
      steps: results,
      ...(diverged[0] ? { diverged_at: diverged[0].seq } : {}),
      diverged: diverged.length,
      duration_ms: Date.now() - started,
    };
  }

  /** A step recorded from the exec stream runs on the stream again (stdin sent, then its end). */
  private async streamed(
    p: Principal,
    project: string,
    fork: string,
    request: ExecRequest,
    stdin: Buffer | undefined,
  ): Promise<EpisodeOutcome> {
    const tap = await this.episodes.stream(p, project, fork, request);
    const hashes = { stdout: createHash("sha256"), stderr: createHash("sha256") };
    const bytes = { stdout: 0, stderr: 0 };
    let call: StreamCall<"env.exec"> | undefined;
    try {
      call = await this.environments.execStream(p, project, fork, request);
      if (stdin && stdin.length > 0) {
        tap?.stdin(stdin);
        await call.outbound.write("stdin", stdin);
      }
      call.outbound.end();
      for await (const chunk of call.inbound) {
        const c = chunk as { channel: string; data: Buffer };
        const channel = c.channel === "stderr" ? "stderr" : "stdout";
        tap?.output(channel, c.data);
        hashes[channel].update(c.data);
        bytes[channel] += c.data.length;
      }
      const r = await call.result;
      await tap?.finish(r);
      return {
        exit_code: r.exit_code,
        stdout_sha256: hashes.stdout.digest("hex"),
        stderr_sha256: hashes.stderr.digest("hex"),
        stdout_bytes: bytes.stdout,
        stderr_bytes: bytes.stderr,
        timed_out: r.timed_out,
        truncated: r.truncated,
      };
    } catch (err) {
      const failure = call ? await callFailure(call, err) : err;
      await tap?.fail(failure);
      throw failure;
    } finally {
      call?.close();
    }
  }

  private async replayStep(
    p: Principal,
    project: string,
    fork: string,
    { step, kept }: Kept,
    env: Record<string, string>,
  ): Promise<ReplayStep> {
    const recorded: EpisodeOutcome = step.result ?? {};
    let replayed: EpisodeOutcome = {};
    let error: { code: string; message: string } | undefined;
    try {
      if (step.exec) {
        const x = step.exec;
        const request: ExecRequest = {
          ...(x.cmd ? { cmd: x.cmd } : { shell: x.shell ?? "" }),
          ...(x.service !== undefined ? { service: x.service } : {}),
          ...(x.user !== undefined ? { user: x.user } : {}),
          ...(x.cwd !== undefined ? { cwd: x.cwd } : {}),
          ...(x.env_keys.length > 0
            ? { env: Object.fromEntries(x.env_keys.map((k) => [k, env[k] ?? ""])) }
            : {}),
          ...(x.timeout !== undefined ? { timeout: x.timeout } : {}),
          ...(x.output_limit !== undefined ? { output_limit: x.output_limit } : {}),
          ...(x.tty ? { tty: true } : {}),
          ...(kept && x.stdin_bytes > 0 && !x.streamed ? { stdin: kept.toString("base64") } : {}),
        };
        replayed = x.streamed
          ? await this.streamed(p, project, fork, request, kept)
          : await this.episodes
              .exec(p, project, fork, request, () => this.environments.exec(p, project, fork, request))
              .then((r) => ({
                exit_code: r.exit_code,
                ...digests(outputBytes(r.stdout, r.encoding), outputBytes(r.stderr, r.encoding)),
                timed_out: r.timed_out,
                truncated: r.truncated,
              }));
      } else if (step.files) {
        const f = step.files;
        const to = {
          path: f.path,
          ...(f.service !== undefined ? { service: f.service } : {}),
          ...(f.user !== undefined ? { user: f.user } : {}),
        };
        const body = Readable.from(kept ? [kept] : []);
        const r = await this.episodes.putFiles(p, project, fork, to, body, (b) =>
          this.environments.putFiles(p, project, fork, to, b),
        );
        replayed = { entries: r.entries };
      }
    } catch (err) {
      error = {
        code: err instanceof DenvError ? err.code : "internal",
        message: err instanceof Error ? err.message : String(err),
      };
    }
    const differs: ReplayStep["differs"] = [];
    if ((step.error?.code ?? undefined) !== error?.code) differs.push("error");
    if (recorded.exit_code !== replayed.exit_code) differs.push("exit_code");
    // A digest the host could not give (a result answered from its journal) is not compared.
    if (recorded.stdout_sha256 !== undefined && recorded.stdout_sha256 !== replayed.stdout_sha256)
      differs.push("stdout");
    if (recorded.stderr_sha256 !== undefined && recorded.stderr_sha256 !== replayed.stderr_sha256)
      differs.push("stderr");
    if (recorded.entries !== replayed.entries) differs.push("entries");
    return {
      seq: step.seq,
      kind: step.kind,
      status: differs.length === 0 ? "same" : "diverged",
      differs,
      recorded,
      replayed,
      ...(error ? { error } : {}),
    };
  }
}

/** The rows that are steps (not the overflow count, nor a write that failed). */
function parsed(rows: EpisodeStepRecord[]): Kept[] {
  const out: Kept[] = [];
  for (const r of rows) {
    const s = EpisodeStep.safeParse(r.data);
    if (s.success) out.push({ step: s.data, kept: r.kept });
  }
  return out;
}
