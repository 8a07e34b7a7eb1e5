import { createHash, type Hash } from "node:crypto";
import {
  ControlPlaneMessages,
  DEFAULT_OUTPUT_LIMIT,
  DenvError,
  EPISODE_LOG,
  type EpisodeExec,
  type EpisodeOutcome,
  EpisodeStep,
  type ExecRequest,
  type ExecResponse,
  type FilesPutResponse,
} from "@denv/spec";
import type { z } from "zod";
import { nowIso } from "../ids.js";
import { errorMessage } from "../log.js";
import type { EnvironmentRecord } from "../store/records.js";
import type { Store } from "../store/store.js";
import { assertScope, NotFound, type Principal } from "./access.js";

/** What the host answered for a streamed exec: its result and the bytes the cp counted itself. */
export interface StreamTap {
  stdin(data: Buffer): void;
  output(channel: "stdout" | "stderr", data: Buffer): void;
  /** Checks the host's result against what the cp counted; throws the wrong answer (recorded). */
  finish(result: ExecResponse & { streamed?: StreamedCounts | undefined }): Promise<void>;
  fail(err: unknown): Promise<void>;
}

interface StreamedCounts {
  stdin_bytes: number;
  stdout_bytes: number;
  stderr_bytes: number;
}

type Exec = z.output<typeof EpisodeExec>;

/**
 * Keeps the command log of every episode (an environment forked from a version: a fork or a
 * sandbox) as the control plane asked and the host answered. Only what comes through the exec
 * and files routes is a step: the verifier runs inside env.verify and is never in the log.
 */
export class EpisodeRecorder {
  readonly maxSteps = EPISODE_LOG.maxSteps;
  /** The last seq handed out per environment (keyed with its creation, so a re-created name starts afresh). */
  private readonly seqs = new Map<string, Promise<number>>();

  constructor(private readonly store: Store) {}

  /** The environment, if the token may read it (as EnvironmentService.require decides). */
  private async require(p: Principal, project: string, env: string): Promise<EnvironmentRecord> {
    const id = `${project}/${env}`;
    assertScope(p, project, () => NotFound.environment(id));
    const e = await this.store.getEnvironment(id);
    if (!e) throw NotFound.environment(id);
    return e;
  }

  /** An environment forked from a version keeps a log; others (a deployed alpha) do not. */
  static isEpisode(e: EnvironmentRecord): boolean {
    return e.parentVersion !== undefined && !e.pool;
  }

  private nextSeq(e: EnvironmentRecord): Promise<number> {
    const key = `${e.id}@${e.createdAt}`;
    const next = (this.seqs.get(key) ?? this.store.lastEpisodeSeq(e.id)).then((n) => n + 1);
    this.seqs.set(key, next);
    next.catch(() => this.seqs.delete(key));
    return next;
  }

  /** Records a JSON exec around `run`; the host's answer is checked against the request first. */
  async exec(
    p: Principal,
    project: string,
    env: string,
    req: ExecRequest,
    run: () => Promise<ExecResponse & { output_kept?: boolean | undefined }>,
  ): Promise<ExecResponse> {
    const e = await this.require(p, project, env);
    if (!EpisodeRecorder.isEpisode(e)) return run();
    const hostId = e.hostId ?? "?";
    const seq = this.nextSeq(e);
    const started = Date.now();
    const stdin = req.stdin === undefined ? undefined : Buffer.from(req.stdin, "base64");
    const exec = execInfo(req, stdin, false);
    const keep = stdin && stdin.length <= EPISODE_LOG.keptBytesPerStep ? stdin : undefined;
    try {
      const r = await run();
      const stdout = outputBytes(r.stdout, r.encoding);
      const stderr = outputBytes(r.stderr, r.encoding);
      const limit = req.output_limit ?? DEFAULT_OUTPUT_LIMIT;
      for (const [name, b] of [
        ["stdout", stdout],
        ["stderr", stderr],
      ] as const) {
        if (b.length > limit) {
          throw new DenvError(
            "internal",
            ControlPlaneMessages.wrongAnswer(
              hostId,
              "env.exec",
              `its ${name} is ${b.length} bytes, over the output_limit of ${limit}`,
            ),
          );
        }
      }
      const kept = r.output_kept !== false;
      await this.write(p, e, await seq, started, { exec }, keep, {
        exit_code: r.exit_code,
        ...(kept ? digests(stdout, stderr) : {}),
        timed_out: r.timed_out,
        truncated: r.truncated,
      });
      return r;
    } catch (err) {
      await this.write(p, e, await seq, started, { exec }, keep, undefined, err);
      throw err;
    }
  }

  /** A tap for a streamed exec: it hashes what passes and records the step at the end. */
  async stream(p: Principal, project: string, env: string, req: ExecRequest): Promise<StreamTap | undefined> {
    const e = await this.require(p, project, env);
    if (!EpisodeRecorder.isEpisode(e)) return undefined;
    const hostId = e.hostId ?? "?";
    const seq = await this.nextSeq(e);
    const started = Date.now();
    const stdinHash = createHash("sha256");
    const kept: Buffer[] = [];
    let stdinBytes = 0;
    const out: Record<"stdout" | "stderr", { hash: Hash; bytes: number }> = {
      stdout: { hash: createHash("sha256"), bytes: 0 },
      stderr: { hash: createHash("sha256"), bytes: 0 },
    };
    const info = (): { exec: Exec; keptBytes: Buffer | undefined } => {
      const keptBytes = stdinBytes <= EPISODE_LOG.keptBytesPerStep ? Buffer.concat(kept) : undefined;
      const exec: Exec = {
        ...execInfo(req, undefined, true),
        stdin_bytes: stdinBytes,
        stdin_kept: stdinBytes === 0 || keptBytes !== undefined,
        ...(stdinBytes > 0 ? { stdin_sha256: stdinHash.copy().digest("hex") } : {}),
      };
      return { exec, keptBytes: stdinBytes > 0 ? keptBytes : undefined };
    };
    let done = false;
    return {
      stdin(data) {
        stdinHash.update(data);
        stdinBytes += data.length;
        if (stdinBytes <= EPISODE_LOG.keptBytesPerStep) kept.push(data);
        else kept.length = 0;
      },
      output(channel, data) {
        out[channel].hash.update(data);
        out[channel].bytes += data.length;
      },
      finish: async (r) => {
        if (done) return;
        done = true;
        const { exec, keptBytes } = info();
        const s = r.streamed;
        const wrong =
          s === undefined
            ? undefined
            : s.stdout_bytes !== out.stdout.bytes
              ? `it says ${s.stdout_bytes} stdout bytes, the stream carried ${out.stdout.bytes}`
              : s.stderr_bytes !== out.stderr.bytes
                ? `it says ${s.stderr_bytes} stderr bytes, the stream carried ${out.stderr.bytes}`
                : s.stdin_bytes > stdinBytes
                  ? `it says it read ${s.stdin_bytes} stdin bytes, ${stdinBytes} were sent`
                  : undefined;
        if (wrong !== undefined) {
          const err = new DenvError("internal", ControlPlaneMessages.wrongAnswer(hostId, "env.exec", wrong));
          await this.write(p, e, seq, started, { exec }, keptBytes, undefined, err);
          throw err;
        }
        await this.write(p, e, seq, started, { exec }, keptBytes, {
          exit_code: r.exit_code,
          stdout_sha256: out.stdout.hash.digest("hex"),
          stderr_sha256: out.stderr.hash.digest("hex"),
          stdout_bytes: out.stdout.bytes,
          stderr_bytes: out.stderr.bytes,
          timed_out: r.timed_out,
          truncated: r.truncated,
        });
      },
      fail: async (err) => {
        if (done) return;
        done = true;
        const { exec, keptBytes } = info();
        await this.write(p, e, seq, started, { exec }, keptBytes, undefined, err);
      },
    };
  }

  /** Records a files put around `run`, which pumps `body` (hashed and kept here as it passes). */
  async putFiles(
    p: Principal,
    project: string,
    env: string,
    to: { path: string; service?: string | undefined; user?: string | undefined },
    body: AsyncIterable<Buffer>,
    run: (body: AsyncIterable<Buffer>) => Promise<z.output<typeof FilesPutResponse>>,
  ): Promise<z.output<typeof FilesPutResponse>> {
    const e = await this.require(p, project, env);
    if (!EpisodeRecorder.isEpisode(e)) return run(body);
    const hostId = e.hostId ?? "?";
    const seq = this.nextSeq(e);
    const started = Date.now();
    const hash = createHash("sha256");
    let kept: Buffer[] | undefined = [];
    let bytes = 0;
    async function* tapped(): AsyncGenerator<Buffer> {
      for await (const chunk of body) {
        hash.update(chunk);
        bytes += chunk.length;
        if (kept && bytes <= EPISODE_LOG.keptBytesPerStep) kept.push(chunk);
        else kept = undefined;
        yield chunk;
      }
    }
    const files = () => ({
      path: to.path,
      ...(to.service !== undefined ? { service: to.service } : {}),
      ...(to.user !== undefined ? { user: to.user } : {}),
      sha256: hash.copy().digest("hex"),
      bytes,
      kept: kept !== undefined,
    });
    try {
      const r = await run(tapped());
      if (r.bytes < 0 || r.entries < 0) {
        throw new DenvError(
          "internal",
          ControlPlaneMessages.wrongAnswer(
            hostId,
            "env.files.put",
            `it says ${r.entries} entries of ${r.bytes} bytes`,
          ),
        );
      }
      await this.write(p, e, await seq, started, { files: files() }, kept && Buffer.concat(kept), {
        entries: r.entries,
      });
      return r;
    } catch (err) {
      await this.write(
        p,
        e,
        await seq,
        started,
        { files: files() },
        kept && Buffer.concat(kept),
        undefined,
        err,
      );
      throw err;
    }
  }

  /**
   * Writes one step; past the cap only the count of steps run since is kept (one row). A write
   * that fails is never raised: the command itself ran and its caller gets its answer.
   */
  private async write(
    p: Principal,
    e: EnvironmentRecord,
    seq: number,
    started: number,
    what: { exec: Exec } | { files: z.output<typeof EpisodeStep>["files"] },
    kept: Buffer | undefined,
    result: EpisodeOutcome | undefined,
    err?: unknown,
  ): Promise<void> {
    try {
      if (seq > this.maxSteps) {
        await this.store.putEpisodeStep({
          environment: e.id,
          seq: this.maxSteps + 1,
          data: { dropped: seq - this.maxSteps },
        });
        return;
      }
      const step = EpisodeStep.parse({
        seq,
        kind: "exec" in what ? "exec" : "files.put",
        started_at: new Date(started).toISOString(),
        duration_ms: Date.now() - started,
        token: p.tokenId,
        ...what,
        ...(result ? { result } : {}),
        ...(err !== undefined
          ? {
              error: {
                code: err instanceof DenvError ? err.code : "internal",
                message: errorMessage(err),
              },
            }
          : {}),
      });
      await this.store.putEpisodeStep({ environment: e.id, seq, data: step, ...(kept ? { kept } : {}) });
    } catch (writeErr) {
      // The command ran and its caller gets its answer; the log says the step is missing.
      await this.store
        .putEpisodeStep({
          environment: e.id,
          seq,
          data: { unrecorded: errorMessage(writeErr), at: nowIso() },
        })
        .catch(() => undefined);
    }
  }
}

function execInfo(req: ExecRequest, stdin: Buffer | undefined, streamed: boolean): Exec {
  return {
    ...(req.cmd ? { cmd: req.cmd } : {}),
    ...(req.shell !== undefined ? { shell: req.shell } : {}),
    ...(req.service !== undefined ? { service: req.service } : {}),
    ...(req.user !== undefined ? { user: req.user } : {}),
    ...(req.cwd !== undefined ? { cwd: req.cwd } : {}),
    env_keys: Object.keys(req.env ?? {}).sort(),
    ...(req.timeout !== undefined ? { timeout: req.timeout } : {}),
    ...(req.output_limit !== undefined ? { output_limit: req.output_limit } : {}),
    ...(req.tty ? { tty: true } : {}),
    ...(stdin ? { stdin_sha256: sha256(stdin) } : {}),
    stdin_bytes: stdin?.length ?? 0,
    stdin_kept: stdin === undefined || stdin.length <= EPISODE_LOG.keptBytesPerStep,
    streamed,
  };
}

export function sha256(b: Buffer): string {
  return createHash("sha256").update(b).digest("hex");
}

export function outputBytes(s: string, encoding: "utf8" | "base64"): Buffer {
  return Buffer.from(s, encoding === "base64" ? "base64" : "utf8");
}

export function digests(stdout: Buffer, stderr: Buffer): EpisodeOutcome {
  return {
    stdout_sha256: sha256(stdout),
    stderr_sha256: sha256(stderr),
    stdout_bytes: stdout.length,
    stderr_bytes: stderr.length,
  };
}
