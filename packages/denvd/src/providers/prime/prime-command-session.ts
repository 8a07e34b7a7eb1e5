import { randomUUID } from "node:crypto";
import {
  decodeEvent,
  encodeSendInput,
  encodeSendSignal,
  encodeStartRequest,
  type StartRequest,
} from "./prime-proto.js";
import type { GatewayGrant } from "./prime-schemas.js";

const SERVICE = "command_session.CommandSession";
const END_STREAM = 0x02;

export interface CommandOptions {
  /** An existing user of the image; Prime runs commands as the image's user when unset. */
  user?: string;
  env?: Record<string, string>;
  cwd?: string;
  /** Fed to the command, which then reads end-of-file. */
  stdin?: Buffer;
  /** Prime kills the command after this long (the Connect deadline); none when unset. */
  timeoutMs?: number;
  onStdout?: (chunk: Buffer) => void;
  onStderr?: (chunk: Buffer) => void;
  /** false: output goes only to onStdout/onStderr, and the result's buffers are empty. */
  collect?: boolean;
  /** Aborting kills the command (SIGKILL to its process group) and rejects. */
  signal?: AbortSignal;
}

export interface CommandResult {
  exitCode: number;
  stdout: Buffer;
  stderr: Buffer;
}

/** A refusal of the gateway's RPCs: Connect's error code and Prime's message. */
export class ConnectCallError extends Error {
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

/**
 * One command through a sandbox gateway's command session, in Connect's protocol with the
 * binary codec as the official SDK speaks it: Start is a server stream of enveloped
 * StartResponses ending in a JSON end-of-stream message. The session has no end-of-input
 * operation (the SDK says so too), so stdin is sent with SendInput to `head -c <n>` piped into
 * the command, which thus reads exactly those bytes and then end-of-file.
 */
export async function runCommandSession(
  grant: GatewayGrant,
  argv: string[],
  o: CommandOptions,
): Promise<CommandResult> {
  const [cmd, ...args] = o.stdin
    ? ["/bin/sh", "-c", 'head -c "$0" | "$@"', String(o.stdin.length), ...argv]
    : argv;
  if (!cmd) throw new Error("runCommand needs a command");
  const sessionUuid = randomUUID();
  const start: StartRequest = {
    command: {
      cmd,
      args,
      envs: o.env ?? {},
      ...(o.cwd !== undefined ? { cwd: o.cwd } : {}),
      ...(o.user !== undefined ? { user: o.user } : {}),
    },
    stdin: o.stdin !== undefined,
    sessionUuid,
  };
  const body = envelope(0, encodeStartRequest(start));
  const res = await fetch(`${grant.base}/${SERVICE}/Start`, {
    method: "POST",
    headers: {
      authorization: `Bearer ${grant.token}`,
      "content-type": "application/connect+proto",
      "connect-protocol-version": "1",
      ...(o.timeoutMs !== undefined ? { "connect-timeout-ms": String(o.timeoutMs) } : {}),
    },
    body,
    ...(o.signal ? { signal: o.signal } : {}),
  });
  if (res.status !== 200 || !res.body) throw await unaryError(res);
  const stdout: Buffer[] = [];
  const stderr: Buffer[] = [];
  let exitCode: number | undefined;
  let started = false;
  // Best effort: the command may have ended meanwhile, and the abort is what the caller sees.
  const kill = () => {
    if (!started) return;
    const message = encodeSendSignal({ sessionUuid, signal: "SIGKILL", signalUuid: randomUUID() });
    unary(grant, "SendSignal", message).catch(() => undefined);
  };
  o.signal?.addEventListener("abort", kill, { once: true });
  try {
    let pending = Buffer.alloc(0);
    for await (const chunk of res.body) {
      pending = Buffer.concat([pending, chunk]);
      while (pending.length >= 5 && pending.length >= 5 + pending.readUInt32BE(1)) {
        const flags = pending[0] ?? 0;
        const message = pending.subarray(5, 5 + pending.readUInt32BE(1));
        pending = pending.subarray(5 + message.length);
        if (flags & END_STREAM) {
          const end = JSON.parse(message.toString() || "{}") as {
            error?: { code?: string; message?: string };
          };
          if (end.error) throw new ConnectCallError(end.error.code ?? "unknown", end.error.message ?? "");
          continue;
        }
        const event = decodeEvent(message);
        if (event?.kind === "start") {
          started = true;
          if (o.stdin && o.stdin.length > 0)
            await unary(
              grant,
              "SendInput",
              encodeSendInput({ sessionUuid, stdin: o.stdin, inputUuid: randomUUID() }),
            );
        } else if (event?.kind === "stdout") {
          if (o.collect !== false) stdout.push(event.data);
          o.onStdout?.(event.data);
        } else if (event?.kind === "stderr") {
          if (o.collect !== false) stderr.push(event.data);
          o.onStderr?.(event.data);
        } else if (event?.kind === "end") exitCode = event.exitCode;
      }
    }
  } finally {
    o.signal?.removeEventListener("abort", kill);
  }
  if (exitCode === undefined)
    throw new ConnectCallError("unknown", "the command stream ended without an exit code");
  return { exitCode, stdout: Buffer.concat(stdout), stderr: Buffer.concat(stderr) };
}

async function unary(grant: GatewayGrant, rpc: string, message: Buffer): Promise<void> {
  const res = await fetch(`${grant.base}/${SERVICE}/${rpc}`, {
    method: "POST",
    headers: {
      authorization: `Bearer ${grant.token}`,
      "content-type": "application/proto",
      "connect-protocol-version": "1",
    },
    body: message,
  });
  if (res.status !== 200) throw await unaryError(res);
  await res.arrayBuffer();
}

/** A non-200 Connect answer: JSON `{code, message}` when the gateway sent one. */
async function unaryError(res: Response): Promise<ConnectCallError> {
  const text = await res.text();
  try {
    const e = JSON.parse(text) as { code?: string; message?: string };
    if (e.code) return new ConnectCallError(e.code, e.message ?? "");
  } catch {
    // Not Connect's JSON: a proxy's or the gateway's own page.
  }
  return new ConnectCallError(
    res.status === 401 ? "unauthenticated" : "unknown",
    `HTTP ${res.status}: ${text}`,
  );
}

function envelope(flags: number, payload: Buffer): Buffer {
  const head = Buffer.alloc(5);
  head[0] = flags;
  head.writeUInt32BE(payload.length, 1);
  return Buffer.concat([head, payload]);
}
