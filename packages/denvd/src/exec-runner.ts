import type { Readable } from "node:stream";
import { DEFAULT_OUTPUT_LIMIT, ExitCodes } from "@denv/spec";
import type { DockerClient } from "./docker/docker-client.js";
import { killTree } from "./host/proc-tree.js";

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
}

export interface RawExecResult {
  exitCode: number;
  stdout: Buffer;
  stderr: Buffer;
  timedOut: boolean;
  truncated: boolean;
  durationMs: number;
}

class CappedBuffer {
  private chunks: Buffer[] = [];
  private size = 0;
  truncated = false;
  constructor(private readonly limit: number) {}
  push(b: Buffer): void {
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
  const handle = await docker.exec(o.containerId, {
    cmd: o.argv,
    ...(o.user !== undefined ? { user: o.user } : {}),
    ...(o.cwd !== undefined ? { cwd: o.cwd } : {}),
    ...(o.env ? { env: Object.entries(o.env).map(([k, v]) => `${k}=${v}`) } : {}),
    tty: o.tty ?? false,
    stdin: o.stdin !== undefined,
  });
  const out = new CappedBuffer(limit);
  const err = new CappedBuffer(limit);
  handle.stdout.on("data", (b: Buffer) => {
    out.push(b);
    o.onStdout?.(b);
  });
  handle.stderr.on("data", (b: Buffer) => {
    err.push(b);
    o.onStderr?.(b);
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
      o.stdin.pipe(sink as NodeJS.WritableStream);
    }
  }

  let timedOut = false;
  let timer: NodeJS.Timeout | undefined;
  if (o.timeoutMs !== undefined) {
    timer = setTimeout(() => {
      timedOut = true;
      void (async () => {
        // The pid may not have been known when the exec started: ask again.
        const root = pid || (await handle.pid().catch(() => 0));
        if (root > 0) await killTree(root);
      })();
    }, o.timeoutMs);
  }
  await ended;
  if (timer) clearTimeout(timer);
  await pidKnown.catch(() => 0);
  let exitCode = await handle.exitCode();
  const stderr = err.value();
  if (timedOut) exitCode = ExitCodes.timedOut;
  else if (exitCode === null || (exitCode === 126 && pid === 0)) {
    // The process never started: tell a missing executable from other failures, as a shell does.
    const text = stderr.toString("utf8") + out.value().toString("utf8");
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
    durationMs: Date.now() - started,
  };
}
