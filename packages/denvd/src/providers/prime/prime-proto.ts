/**
 * The few messages of Prime's `command_session.CommandSession` service (the gateway's command
 * API), encoded by hand in protobuf's binary wire format: the official SDK speaks Connect with
 * the binary codec (`application/connect+proto` for Start's server stream, `application/proto`
 * for the unary SendInput and SendSignal), and the repo carries no protobuf runtime.
 *
 * Field numbers, from the SDK's command_session.proto descriptor:
 * CommandSpec {1 cmd, 2 repeated args, 3 map envs, 4 optional cwd, 5 optional user};
 * StartRequest {1 command, 2 pty, 4 optional stdin, 5 optional session_uuid};
 * StartResponse {1 event}; CommandSessionEvent oneof {1 start {1 pid}, 2 data {1 stdout |
 * 2 stderr | 3 pty}, 3 end {1 sint32 exit_code, 2 exited, 3 status, 4 optional error},
 * 4 keepalive}; CommandSessionSelector oneof {1 pid, 3 session_uuid};
 * SendInputRequest {1 session, 2 input {1 stdin | 2 pty}, 3 input_uuid};
 * SendSignalRequest {1 session, 2 signal (SIGTERM = 15, SIGKILL = 9), 3 signal_uuid}.
 */

export interface CommandSpec {
  cmd: string;
  args: string[];
  envs: Record<string, string>;
  cwd?: string;
  /** An existing user of the sandbox's image the command runs as (the image's user if unset). */
  user?: string;
}

export interface StartRequest {
  command: CommandSpec;
  /** Whether the process's stdin stays open for SendInput. */
  stdin: boolean;
  sessionUuid?: string;
}

export type SessionEvent =
  | { kind: "start"; pid: number }
  | { kind: "stdout" | "stderr"; data: Buffer }
  | { kind: "end"; exitCode: number; status: string; error?: string }
  | { kind: "keepalive" };

export interface SendInputRequest {
  sessionUuid: string;
  stdin: Buffer;
  inputUuid: string;
}

export type SessionSignal = "SIGTERM" | "SIGKILL";

export interface SendSignalRequest {
  sessionUuid: string;
  signal: SessionSignal;
  signalUuid: string;
}

const SIGNAL_NUMBERS: Record<SessionSignal, number> = { SIGTERM: 15, SIGKILL: 9 };

const VARINT = 0;
const BYTES = 2;

function varint(n: bigint): Buffer {
  const out: number[] = [];
  let v = BigInt.asUintN(64, n);
  while (v >= 0x80n) {
    out.push(Number(v & 0x7fn) | 0x80);
    v >>= 7n;
  }
  out.push(Number(v));
  return Buffer.from(out);
}

/** Appends fields in order; `undefined` values are left out (proto3 optional, unset). */
class Writer {
  private readonly parts: Buffer[] = [];

  uint(field: number, n: number | undefined): this {
    if (n !== undefined) this.parts.push(varint(BigInt((field << 3) | VARINT)), varint(BigInt(n)));
    return this;
  }

  sint(field: number, n: number): this {
    return this.uint(field, n >= 0 ? n * 2 : -n * 2 - 1);
  }

  bool(field: number, b: boolean | undefined): this {
    return this.uint(field, b === undefined ? undefined : b ? 1 : 0);
  }

  bytes(field: number, b: Buffer | string | undefined): this {
    if (b === undefined) return this;
    const data = typeof b === "string" ? Buffer.from(b) : b;
    this.parts.push(varint(BigInt((field << 3) | BYTES)), varint(BigInt(data.length)), data);
    return this;
  }

  finish(): Buffer {
    return Buffer.concat(this.parts);
  }
}

/** The fields of one message, in order: varints as numbers, length-delimited as bytes. */
function read(buf: Buffer): Array<{ field: number; n: number; b: Buffer }> {
  const out: Array<{ field: number; n: number; b: Buffer }> = [];
  let at = 0;
  const next = (): bigint => {
    let v = 0n;
    for (let shift = 0n; ; shift += 7n) {
      if (at >= buf.length) throw new Error("truncated protobuf message");
      const byte = buf[at++] ?? 0;
      v |= BigInt(byte & 0x7f) << shift;
      if (byte < 0x80) return v;
    }
  };
  while (at < buf.length) {
    const key = Number(next());
    const field = key >> 3;
    const wire = key & 7;
    if (wire === VARINT) out.push({ field, n: Number(BigInt.asUintN(32, next())), b: Buffer.alloc(0) });
    else if (wire === BYTES) {
      const len = Number(next());
      if (at + len > buf.length) throw new Error("truncated protobuf message");
      out.push({ field, n: 0, b: buf.subarray(at, at + len) });
      at += len;
    } else if (wire === 5) at += 4;
    else if (wire === 1) at += 8;
    else throw new Error(`unsupported protobuf wire type ${wire}`);
  }
  return out;
}

function selector(sessionUuid: string): Buffer {
  return new Writer().bytes(3, sessionUuid).finish();
}

function selectedSession(buf: Buffer): string {
  const uuid = read(buf).find((f) => f.field === 3);
  if (!uuid) throw new Error("the session selector names no session_uuid");
  return uuid.b.toString();
}

export function encodeStartRequest(r: StartRequest): Buffer {
  const spec = new Writer().bytes(1, r.command.cmd);
  for (const a of r.command.args) spec.bytes(2, a);
  for (const [k, v] of Object.entries(r.command.envs))
    spec.bytes(3, new Writer().bytes(1, k).bytes(2, v).finish());
  spec.bytes(4, r.command.cwd).bytes(5, r.command.user);
  return new Writer().bytes(1, spec.finish()).bool(4, r.stdin).bytes(5, r.sessionUuid).finish();
}

export function decodeStartRequest(buf: Buffer): StartRequest {
  const r: StartRequest = { command: { cmd: "", args: [], envs: {} }, stdin: false };
  for (const f of read(buf)) {
    if (f.field === 1) {
      for (const s of read(f.b)) {
        if (s.field === 1) r.command.cmd = s.b.toString();
        else if (s.field === 2) r.command.args.push(s.b.toString());
        else if (s.field === 3) {
          const entry = read(s.b);
          const key = entry.find((e) => e.field === 1)?.b.toString() ?? "";
          r.command.envs[key] = entry.find((e) => e.field === 2)?.b.toString() ?? "";
        } else if (s.field === 4) r.command.cwd = s.b.toString();
        else if (s.field === 5) r.command.user = s.b.toString();
      }
    } else if (f.field === 4) r.stdin = f.n !== 0;
    else if (f.field === 5) r.sessionUuid = f.b.toString();
  }
  return r;
}

/** A StartResponse (or ConnectResponse: the same shape) carrying one event. */
export function encodeEvent(e: SessionEvent): Buffer {
  const event = new Writer();
  if (e.kind === "start") event.bytes(1, new Writer().uint(1, e.pid).finish());
  else if (e.kind === "stdout") event.bytes(2, new Writer().bytes(1, e.data).finish());
  else if (e.kind === "stderr") event.bytes(2, new Writer().bytes(2, e.data).finish());
  else if (e.kind === "end")
    event.bytes(
      3,
      new Writer().sint(1, e.exitCode).bool(2, true).bytes(3, e.status).bytes(4, e.error).finish(),
    );
  else event.bytes(4, Buffer.alloc(0));
  return new Writer().bytes(1, event.finish()).finish();
}

/** The event of a StartResponse; undefined for one without (or with an unknown) event. */
export function decodeEvent(buf: Buffer): SessionEvent | undefined {
  const event = read(buf).find((f) => f.field === 1);
  const [which] = event ? read(event.b) : [];
  if (!which) return undefined;
  const body = read(which.b);
  if (which.field === 1) return { kind: "start", pid: body.find((f) => f.field === 1)?.n ?? 0 };
  if (which.field === 2) {
    const [out] = body;
    if (!out) return undefined;
    return { kind: out.field === 2 ? "stderr" : "stdout", data: Buffer.from(out.b) };
  }
  if (which.field === 3) {
    const zigzag = body.find((f) => f.field === 1)?.n ?? 0;
    const error = body.find((f) => f.field === 4)?.b.toString();
    return {
      kind: "end",
      exitCode: zigzag & 1 ? -((zigzag + 1) / 2) : zigzag / 2,
      status: body.find((f) => f.field === 3)?.b.toString() ?? "",
      ...(error !== undefined ? { error } : {}),
    };
  }
  return which.field === 4 ? { kind: "keepalive" } : undefined;
}

export function encodeSendInput(r: SendInputRequest): Buffer {
  return new Writer()
    .bytes(1, selector(r.sessionUuid))
    .bytes(2, new Writer().bytes(1, r.stdin).finish())
    .bytes(3, r.inputUuid)
    .finish();
}

export function decodeSendInput(buf: Buffer): SendInputRequest {
  const f = read(buf);
  const input = f.find((x) => x.field === 2);
  return {
    sessionUuid: selectedSession(f.find((x) => x.field === 1)?.b ?? Buffer.alloc(0)),
    stdin: Buffer.from((input ? read(input.b) : []).find((x) => x.field === 1)?.b ?? Buffer.alloc(0)),
    inputUuid: f.find((x) => x.field === 3)?.b.toString() ?? "",
  };
}

export function encodeSendSignal(r: SendSignalRequest): Buffer {
  return new Writer()
    .bytes(1, selector(r.sessionUuid))
    .uint(2, SIGNAL_NUMBERS[r.signal])
    .bytes(3, r.signalUuid)
    .finish();
}

export function decodeSendSignal(buf: Buffer): SendSignalRequest {
  const f = read(buf);
  const n = f.find((x) => x.field === 2)?.n;
  const signal = (Object.keys(SIGNAL_NUMBERS) as SessionSignal[]).find((s) => SIGNAL_NUMBERS[s] === n);
  if (!signal) throw new Error(`unsupported signal ${n ?? "(unset)"}`);
  return {
    sessionUuid: selectedSession(f.find((x) => x.field === 1)?.b ?? Buffer.alloc(0)),
    signal,
    signalUuid: f.find((x) => x.field === 3)?.b.toString() ?? "",
  };
}
