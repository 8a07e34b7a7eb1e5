import type { Readable } from "node:stream";
import { DEFAULT_OUTPUT_LIMIT, ExitCodes } from "@denv/spec";
import type { DockerClient } from "./docker/docker-client.js";
import { killAll, killTree, statOf } from "./host/proc-tree.js";

/** One exec on a container, with the exec contract's semantics. */
export interface RunExecOptions {
  containerId: string;
  argv: string[];
  user?: string;
  cwd?: string;
  env?: Record<string, string>;
  stdin?: Buffer | Readable;
  timeoutMs?: number;
  tty?: boolean;
  outputLimit?: number;
  /** Called with the exec's host pid once it started (the runtime tracks agent processes). */
  onStart?: (pid: number) => void;
  /** Live output, for streaming callers. */
  onStdout?: (chunk: Buffer) => void;
  onStderr?: (chunk: Buffer) => void;
  /**
   * Given once the exec is attached: pausing stops reading the exec's output from Docker, so a
   * slow consumer of onStdout/onStderr blocks the process's writes instead of filling memory.
   */
  onFlow?: (flow: ExecFlow) => void;
  /** false: output goes only to onStdout/onStderr and is not kept (nor capped) in the result. */
  collect?: boolean;
  /** Aborting kills the process tree, as a timeout does; the result says `cancelled`. */
  signal?: AbortSignal;
  /**
   * Processes that left the exec's tree and session (`setsid`, double forks) but belong to it,
   * given the exec's root pid and its start time: killed with the tree on timeout or cancel.
   */
  escapees?: (root: number, rootStart: number) => Promise<number[]>;
}

export interface ExecFlow {
  pause(): void;
  resume(): void;
}

export interface RawExecResult {
  exitCode: number;
  stdout: Buffer;
  stderr: Buffer;
  timedOut: boolean;
  truncated: boolean;
  /** The exec was stopped through `signal`. */
  cancelled: boolean;
  durationMs: number;
}

class CappedBuffer {
  private chunks: Buffer[] = [];
  private size = 0;
  truncated = false;
  constructor(
    private readonly limit: number,
    private readonly keep = true,
  ) {}
  push(b: Buffer): void {
    if (!this.keep) return;
    if (this.size >= this.limit) {
      this.truncated = true;
      return;
    }
    const room = this.limit - this.size;
    if (b.length > room) {
      this.chunks.push(b.subarray(0, room));
      this.size = this.limit;
      this.truncated = true;
    } else {
      this.chunks.push(b);
      this.size += b.length;
    }
  }
  value(): Buffer {
    return Buffer.concat(this.chunks);
  }
}

/** Docker's messages when the exec's process could not be started (they arrive on the stream). */
const NOT_FOUND = /executable file not found|no such file or directory/i;
const CANNOT_RUN = /unable to find user|permission denied|not a directory|OCI runtime exec failed/i;

export async function runExec(docker: DockerClient, o: RunExecOptions): Promise<RawExecResult> {
  const started = Date.now();
  const limit = o.outputLimit ?? DEFAULT_OUTPUT_LIMIT;
  const handle = await docker.containers.exec(o.containerId, {
    cmd: o.argv,
    user: o.user,
    cwd: o.cwd,
    env: o.env ? Object.entries(o.env).map(([k, v]) => `${k}=${v}`) : undefined,
    tty: o.tty ?? false,
    stdin: o.stdin !== undefined,
  });
  const out = new CappedBuffer(limit, o.collect ?? true);
  const err = new CappedBuffer(limit, o.collect ?? true);
  // Once the process is being killed its remaining output must drain so that the exec can end:
  // pausing stops, and after a cancel the output is dropped.
  let killing = false;
  let discard = false;
  o.onFlow?.({
    pause: () => {
      if (!killing) handle.stream.pause();
    },
    resume: () => {
      handle.stream.resume();
    },
  });
  // The first bytes are kept even when output is not collected: a process that could not start
  // is told apart (127 or 126) only by what Docker wrote there.
  const head = new CappedBuffer(4096, true);
  handle.stdout.on("data", (b: Buffer) => {
    out.push(b);
    head.push(b);
    if (!discard) o.onStdout?.(b);
  });
  handle.stderr.on("data", (b: Buffer) => {
    err.push(b);
    head.push(b);
    if (!discard) o.onStderr?.(b);
  });
  const ended = new Promise<void>((resolve) => {
    let open = 2;
    const done = () => {
      if (--open === 0) resolve();
    };
    handle.stdout.on("end", done);
    handle.stderr.on("end", done);
  });

  let pid = 0;
  const pidKnown = handle.pid().then((p) => {
    pid = p;
    if (p > 0) o.onStart?.(p);
    return p;
  });

  if (o.stdin !== undefined) {
    const sink = handle.stream;
    if (Buffer.isBuffer(o.stdin)) {
      sink.write(o.stdin);
      sink.end();
    } else {
      // A stdin that outlives the process must not write into the closed exec stream.
      sink.on("error", () => undefined);
      o.stdin.pipe(sink as NodeJS.WritableStream);
    }
  }

  const kill = async () => {
    killing = true;
    handle.stream.resume();
    // The pid may not have been known when the exec started: ask again.
    const root = pid || (await handle.pid().catch(() => 0));
    if (root <= 0) return;
    const rootStart = (await statOf(root))?.startTime ?? 0;
    await killTree(root, o.containerId);
    if (o.escapees) await killAll(await o.escapees(root, rootStart), o.containerId);
  };
  let timedOut = false;
  let timer: NodeJS.Timeout | undefined;
  if (o.timeoutMs !== undefined) {
    timer = setTimeout(() => {
      timedOut = true;
      void kill();
    }, o.timeoutMs);
  }
  let cancelled = false;
  const onAbort = () => {
    cancelled = true;
    discard = true;
    void kill();
  };
  if (o.signal?.aborted) onAbort();
  else o.signal?.addEventListener("abort", onAbort, { once: true });
  await ended;
  if (o.stdin !== undefined && !Buffer.isBuffer(o.stdin))
    o.stdin.unpipe(handle.stream as NodeJS.WritableStream);
  if (timer) clearTimeout(timer);
  o.signal?.removeEventListener("abort", onAbort);
  await pidKnown.catch(() => 0);
  let exitCode = await handle.exitCode();
  const stderr = err.value();
  if (timedOut) exitCode = ExitCodes.timedOut;
  else if (cancelled) exitCode = exitCode ?? 137;
  else if (exitCode === null || (exitCode === 126 && pid === 0)) {
    // The process never started: tell a missing executable from other failures, as a shell does.
    const text = head.value().toString("utf8");
    exitCode = NOT_FOUND.test(text)
      ? ExitCodes.notFound
      : CANNOT_RUN.test(text)
        ? ExitCodes.cannotExecute
        : 126;
  }
  return {
    exitCode,
    stdout: out.value(),
    stderr,
    timedOut,
    truncated: out.truncated || err.truncated,
    cancelled,
    durationMs: Date.now() - started,
  };
}
