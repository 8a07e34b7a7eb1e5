import { isUtf8 } from "node:buffer";
import { DenvError } from "@denv/spec";
import type { ExecFlow, RawExecResult } from "../exec-runner.js";
import type { ExecOptions } from "../runtime/environment-exec.js";
import {
  abortCode,
  CommandAborted,
  type CommandContext,
  type HandlerResult,
  type Payload,
  throwIfAborted,
  unlessAborted,
} from "./command-context.js";

type ExecResult = HandlerResult<"env.exec">;

/**
 * env.exec. Without `stream` the output comes back in the result (ExecResponse). With it,
 * stdin arrives on the stream and stdout/stderr leave on it as produced, under the reader's
 * credit: when credit runs out the exec's output is no longer read from Docker, so the process
 * blocks on its writes and nothing piles up here. Streamed output is not kept (nor capped).
 */
export async function execCommand(p: Payload<"env.exec">, ctx: CommandContext): Promise<ExecResult> {
  const req = p.exec;
  const base: ExecOptions = {
    ...(req.cmd ? { cmd: req.cmd } : {}),
    ...(req.shell !== undefined ? { shell: req.shell } : {}),
    ...(req.service ? { service: req.service } : {}),
    ...(req.user ? { user: req.user } : {}),
    ...(req.cwd ? { cwd: req.cwd } : {}),
    ...(req.env ? { env: req.env } : {}),
    ...(req.timeout !== undefined ? { timeout: req.timeout } : {}),
    ...(req.tty !== undefined ? { tty: req.tty } : {}),
    ...(req.output_limit !== undefined ? { outputLimit: req.output_limit } : {}),
  };
  if (p.stream === undefined) {
    const raw = await ctx.runtime.exec(p.environment, {
      ...base,
      ...(req.stdin !== undefined ? { stdin: Buffer.from(req.stdin, "base64") } : {}),
      signal: ctx.signal,
    });
    if (raw.cancelled) throwIfAborted(ctx.signal);
    return execResult(raw);
  }
  if (req.stdin !== undefined) {
    throw new DenvError(
      "invalid_request",
      "a streamed exec takes its stdin from the stream, not from exec.stdin",
    );
  }

  const { inbound, outbound } = ctx.streams.open(p.stream);
  // The exec stops with the command, and also when its stdin stream breaks.
  const local = new AbortController();
  const follow = () => local.abort(ctx.signal.reason);
  ctx.signal.addEventListener("abort", follow, { once: true });
  inbound.once("error", () => local.abort("interrupted"));
  let flow: ExecFlow | undefined;
  let paused = false;
  const forward = (channel: "stdout" | "stderr") => (chunk: Buffer) => {
    if (outbound.write(channel, chunk) || paused) return;
    paused = true;
    flow?.pause();
    outbound.once("drain", () => {
      paused = false;
      flow?.resume();
    });
  };
  const raw = await ctx.runtime
    .exec(p.environment, {
      ...base,
      stdin: inbound,
      collect: false,
      onStdout: forward("stdout"),
      onStderr: forward("stderr"),
      onFlow: (f) => {
        flow = f;
      },
      signal: local.signal,
    })
    .finally(() => ctx.signal.removeEventListener("abort", follow));
  if (raw.cancelled) {
    outbound.abort(ctx.signal.aborted ? abortCode(ctx.signal) : "stdin stream failed");
    throwIfAborted(ctx.signal);
    throw new CommandAborted("interrupted");
  }
  // The output still waiting for credit is sent before the result, unless the command is
  // stopped meanwhile (a reader that never grants more).
  await unlessAborted(outbound.end(), ctx.signal);
  return {
    ...execResult(raw),
    streamed: {
      stdin_bytes: inbound.bytes,
      stdout_bytes: outbound.sent.stdout,
      stderr_bytes: outbound.sent.stderr,
      max_buffered_bytes: outbound.maxQueued,
    },
  };
}

/** Output is UTF-8 text when both streams are valid UTF-8, else both are base64. */
function execResult(raw: RawExecResult): ExecResult {
  const text = isUtf8(raw.stdout) && isUtf8(raw.stderr);
  const encoding = text ? "utf8" : "base64";
  return {
    exit_code: raw.exitCode,
    stdout: raw.stdout.toString(encoding),
    stderr: raw.stderr.toString(encoding),
    encoding,
    timed_out: raw.timedOut,
    truncated: raw.truncated,
    duration_ms: raw.durationMs,
  };
}
