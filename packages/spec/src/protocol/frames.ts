import { z } from "zod";
import { PhaseName } from "../phases.js";
import { CommandKind } from "./commands.js";
import { PhaseEvidence } from "./evidence.js";

/**
 * The control plane <-> denvd protocol. denvd dials out to `GET /v1/hosts/stream` (WebSocket,
 * `Authorization: Bearer <host credential>`); every frame is one JSON text message with `v` (the
 * protocol version) and `type`, except `data` frames between peers that both take binary ones
 * (binary-data.ts). Both sides validate every frame with these schemas.
 */
export const PROTOCOL_VERSION = 1;

const v = z.literal(PROTOCOL_VERSION);

/**
 * What a side of the connection understands beyond the JSON frames of version 1. A host
 * announces its own in hello; the control plane answers with its own in a heartbeat. Each side
 * uses a capability only once the other announced it.
 */
export const PeerCapabilities = z.object({
  /** Takes `data` frames as binary WebSocket messages (binary-data.ts). */
  binary_data: z.boolean().optional(),
});
export type PeerCapabilities = z.infer<typeof PeerCapabilities>;

export const HeldEnvironment = z.object({
  id: z.string(),
  status: z.string(),
  parent_version: z.string().optional(),
});

/** host -> cp, first frame after the upgrade, and again after every reconnect. */
export const HelloFrame = z.object({
  v,
  type: z.literal("hello"),
  host_id: z.string(),
  version: z.string(),
  capacity: z.object({
    cpus: z.number(),
    memory_bytes: z.number(),
    disk_free_bytes: z.number(),
    /** Processes the host can run (placement checks pids caps against it when given). */
    pids: z.number().optional(),
  }),
  labels: z.record(z.string(), z.string()),
  environments: z.array(HeldEnvironment),
  versions: z.array(z.string()),
  /** Commands journalled but not done (received or started), for reconciliation. */
  unfinished: z.array(z.string()),
  capabilities: PeerCapabilities.optional(),
  /**
   * Where this host takes direct version transfers from other hosts (denvd --transfer-listen):
   * `HOST:PORT`, the host part an IP address; an unspecified one (0.0.0.0, ::) means "the
   * address my connection to you comes from". The control plane checks it against that address
   * before it sends another host there (docs/reference/protocol.md#direct-transfers).
   */
  transfer_listen: z.string().max(64).optional(),
});

/** cp -> host. `id` is the idempotency key: a re-sent id returns the recorded result. */
export const CommandFrame = z.object({
  v,
  type: z.literal("command"),
  id: z.string().min(1),
  kind: CommandKind,
  payload: z.record(z.string(), z.unknown()),
  /** Epoch milliseconds after which the host abandons the command. */
  deadline: z.number().int(),
});

/** host -> cp: the command is journalled (received). */
export const AckFrame = z.object({ v, type: z.literal("ack"), id: z.string() });

/**
 * host -> cp, while a command runs: a phase that starts (`phase`), a phase that ended (`ended`,
 * with its `evidence`), or both in one frame (`ended` is over, `phase` starts), and/or a log
 * line. A phase's evidence comes only with its end, validated with `PhaseEvidence[ended]`.
 */
export const ProgressFrame = z
  .object({
    v,
    type: z.literal("progress"),
    id: z.string(),
    phase: PhaseName.optional(),
    ended: PhaseName.optional(),
    evidence: z.record(z.string(), z.unknown()).optional(),
    line: z.string().optional(),
  })
  .superRefine((f, ctx) => {
    if (f.ended === undefined) {
      if (f.evidence !== undefined) {
        ctx.addIssue({
          code: "custom",
          path: ["evidence"],
          message: "evidence comes with the phase that ended",
        });
      }
      return;
    }
    if (f.ended === "switch" || f.ended === "transfer" || f.ended === "smoke verify") {
      ctx.addIssue({
        code: "custom",
        path: ["ended"],
        message: `${f.ended} is the control plane's own phase`,
      });
      return;
    }
    const checked = PhaseEvidence[f.ended].safeParse(f.evidence);
    for (const issue of checked.error?.issues ?? []) {
      ctx.addIssue({ code: "custom", path: ["evidence", ...issue.path], message: issue.message });
    }
  });

/** What the bytes of a data frame are. Append only: the binary layout codes each by its index. */
export const DATA_CHANNELS = ["stdin", "stdout", "stderr", "tunnel", "file"] as const;

/**
 * Both ways: bytes of a stream (exec stdin/stdout/stderr, file transfer, port tunnel). `channel`
 * tells stdout from stderr on exec streams. A writer may have at most the credit its reader
 * granted with `window` frames in flight (back-pressure); the initial credit is
 * INITIAL_WINDOW bytes. Between peers that both announced `binary_data`, the same frame travels
 * as a binary message instead (binary-data.ts).
 */
export const DataFrame = z.object({
  v,
  type: z.literal("data"),
  stream: z.string(),
  seq: z.number().int().nonnegative(),
  channel: z.enum(DATA_CHANNELS).default("tunnel"),
  /** base64 */
  data: z.string(),
});

export const WindowFrame = z.object({
  v,
  type: z.literal("window"),
  stream: z.string(),
  /** Additional bytes the reader accepts. */
  bytes: z.number().int().positive(),
});

export const EndFrame = z.object({
  v,
  type: z.literal("end"),
  stream: z.string(),
  /** Only this direction ends; the other may go on (half-close). */
  error: z.string().optional(),
});

/** cp -> host: stop a running command; its process tree is killed. */
export const CancelFrame = z.object({ v, type: z.literal("cancel"), id: z.string() });

export const ErrorBody = z.object({
  code: z.string(),
  message: z.string(),
  details: z.array(z.string()).optional(),
});

/** host -> cp: the command finished. */
export const ResultFrame = z.object({
  v,
  type: z.literal("result"),
  id: z.string(),
  ok: z.boolean(),
  result: z.unknown().optional(),
  error: ErrorBody.optional(),
});

/**
 * Both ways, every HEARTBEAT_MS; a host that misses 3 is offline. The control plane's answer to
 * a hello is a heartbeat with its `capabilities`.
 */
export const HeartbeatFrame = z.object({
  v,
  type: z.literal("heartbeat"),
  ts: z.number().int(),
  capabilities: PeerCapabilities.optional(),
});

export const Frame = z.discriminatedUnion("type", [
  HelloFrame,
  CommandFrame,
  AckFrame,
  ProgressFrame,
  DataFrame,
  WindowFrame,
  EndFrame,
  CancelFrame,
  ResultFrame,
  HeartbeatFrame,
]);
export type Frame = z.infer<typeof Frame>;
export type HelloFrame = z.infer<typeof HelloFrame>;
export type CommandFrame = z.infer<typeof CommandFrame>;
export type ResultFrame = z.infer<typeof ResultFrame>;
export type DataFrame = z.infer<typeof DataFrame>;
export type ProgressFrame = z.infer<typeof ProgressFrame>;

export const HEARTBEAT_MS = 5_000;
export const MISSED_HEARTBEATS_OFFLINE = 3;
/** The credit every stream starts with, in each direction; a reader may grant more at once. */
export const INITIAL_WINDOW = 256 * 1024;
/** Largest payload of one data frame on an interactive stream (exec, files, tunnels), before base64. */
export const MAX_DATA_CHUNK = 64 * 1024;
/**
 * Bulk streams (a version transfer): the window their reader grants, and the largest payload
 * of one of their data frames. Interactive streams keep INITIAL_WINDOW and MAX_DATA_CHUNK, so
 * their memory bound and their latency behind other frames stay what they were.
 */
export const BULK_WINDOW = 8 * 1024 * 1024;
export const MAX_BULK_CHUNK = 256 * 1024;

/** Parses one frame; a frame of another protocol version is refused with a clear message. */
export function parseFrame(text: string): Frame {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch {
    throw new Error("protocol: a frame is not JSON");
  }
  const version = (raw as { v?: unknown } | null)?.v;
  if (version !== PROTOCOL_VERSION) {
    throw new Error(
      `protocol: frame version ${String(version)} is not ${PROTOCOL_VERSION}; upgrade the older side`,
    );
  }
  return Frame.parse(raw);
}

/**
 * Binary data frames (docs/reference/protocol.md#binary-data-frames): one WebSocket binary
 * message carries one `data` frame with its bytes as they are, instead of base64 inside JSON.
 * Layout, big-endian:
 *
 *   offset  size  field
 *   0       1     BINARY_DATA_MAGIC (0xd1: a data frame of protocol version 1)
 *   1       1     channel, its index in DATA_CHANNELS (stdin 0, stdout 1, stderr 2, tunnel 3, file 4)
 *   2       2     L, the stream id's length in bytes (1..65535)
 *   4       L     the stream id, UTF-8
 *   4+L     8     seq (unsigned; at most 2^53 - 1)
 *   12+L    ...   the bytes (at most MAX_BULK_CHUNK)
 *
 * Both sides use binary only where the other announced it (hello `capabilities`, and the
 * control plane's answer); JSON `data` frames stay valid for older peers.
 */

export const BINARY_DATA_MAGIC = 0xd1;

/** A `data` frame as both programs hold it: its bytes, whichever way they travelled. */
export type RawDataFrame = Omit<DataFrame, "data"> & { data: Uint8Array };
/** A frame as both programs hold it: a data frame carries bytes, not base64. */
export type RawFrame = Exclude<Frame, { type: "data" }> | RawDataFrame;

const FIXED = 1 + 1 + 2 + 8;
const MAX_ID = 0xffff;
const utf8 = new TextEncoder();
const strictUtf8 = new TextDecoder("utf-8", { fatal: true });

/**
 * The header of `frame`'s binary message (everything before the bytes), or undefined when its
 * stream id does not fit the layout (a caller then sends the frame as JSON). A sender may send
 * the header and the bytes as two fragments of one WebSocket message, so the bytes are never
 * copied on their way out.
 */
export function encodeBinaryHeader(frame: Omit<RawDataFrame, "data">): Uint8Array | undefined {
  const id = utf8.encode(frame.stream);
  const channel = DATA_CHANNELS.indexOf(frame.channel);
  if (id.length === 0 || id.length > MAX_ID || channel < 0 || !Number.isSafeInteger(frame.seq))
    return undefined;
  const out = new Uint8Array(FIXED + id.length);
  const view = new DataView(out.buffer, out.byteOffset, out.byteLength);
  out[0] = BINARY_DATA_MAGIC;
  out[1] = channel;
  view.setUint16(2, id.length);
  out.set(id, 4);
  view.setUint32(4 + id.length, Math.floor(frame.seq / 2 ** 32));
  view.setUint32(8 + id.length, frame.seq >>> 0);
  return out;
}

/** `frame`'s binary message in one piece (header, then bytes), or undefined as for the header. */
export function encodeBinaryData(frame: RawDataFrame): Uint8Array | undefined {
  const header = encodeBinaryHeader(frame);
  if (!header) return undefined;
  const out = new Uint8Array(header.length + frame.data.length);
  out.set(header, 0);
  out.set(frame.data, header.length);
  return out;
}

/**
 * Reads one binary data frame: a message in one piece, or as the fragments it arrived in. The
 * bytes are a view into the message (no copy) when they sit in one piece, as they do when the
 * sender sent header and bytes as two fragments. A malformed message throws an Error whose
 * one-line message says what is wrong with it.
 */
export function decodeBinaryData(message: Uint8Array | readonly Uint8Array[]): RawDataFrame {
  const pieces = message instanceof Uint8Array ? [message] : message;
  const length = pieces.reduce((n, p) => n + p.length, 0);
  const bad = (why: string) => new Error(`protocol: binary data frame of ${length} bytes: ${why}`);
  let head = pieces[0] ?? new Uint8Array();
  let rest = pieces.slice(1);
  if (head.length < FIXED + 1 || FIXED + headerIdLength(head) > head.length) {
    // The header does not sit in the first piece (a peer that cut it): join them all.
    head = join(pieces, length);
    rest = [];
  }
  if (length < FIXED + 1) throw bad(`shorter than the ${FIXED + 1}-byte minimum header`);
  if (head[0] !== BINARY_DATA_MAGIC) {
    throw bad(
      `starts with 0x${(head[0] as number).toString(16).padStart(2, "0")}, not 0x${BINARY_DATA_MAGIC.toString(16)} (not a data frame of protocol version 1)`,
    );
  }
  const channel = DATA_CHANNELS[head[1] as number];
  if (channel === undefined) throw bad(`unknown channel ${head[1]}`);
  const view = new DataView(head.buffer, head.byteOffset, head.byteLength);
  const idLength = view.getUint16(2);
  if (idLength === 0) throw bad("empty stream id");
  if (FIXED + idLength > length) throw bad(`a stream id of ${idLength} bytes runs past its end`);
  let stream: string;
  try {
    stream = strictUtf8.decode(head.subarray(4, 4 + idLength));
  } catch {
    throw bad("the stream id is not UTF-8");
  }
  const at = 4 + idLength;
  const seq = view.getUint32(at) * 2 ** 32 + view.getUint32(at + 4);
  if (!Number.isSafeInteger(seq)) throw bad("seq is beyond 2^53 - 1");
  const tail = head.subarray(at + 8);
  const bytes = length - (head.length - tail.length);
  if (bytes > MAX_BULK_CHUNK) throw bad(`${bytes} bytes of data, more than ${MAX_BULK_CHUNK}`);
  const parts = tail.length > 0 ? [tail, ...rest] : rest;
  const data = parts.length === 1 ? (parts[0] as Uint8Array) : join(parts, bytes);
  return { v: PROTOCOL_VERSION, type: "data", stream, seq, channel, data };
}

/** The id length a header claims, or 0 when the piece is too short to say. */
function headerIdLength(head: Uint8Array): number {
  return head.length >= 4 ? ((head[2] as number) << 8) | (head[3] as number) : 0;
}

function join(pieces: readonly Uint8Array[], length: number): Uint8Array {
  if (pieces.length === 1) return pieces[0] as Uint8Array;
  const out = new Uint8Array(length);
  let at = 0;
  for (const p of pieces) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}
