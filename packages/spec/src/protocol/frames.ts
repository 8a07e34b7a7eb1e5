import { z } from "zod";
import { PhaseName } from "../phases.js";
import { CommandKind } from "./commands.js";
import { PhaseEvidence } from "./evidence.js";

/**
 * The control plane <-> denvd protocol. denvd dials out to `GET /v1/hosts/stream` (WebSocket,
 * `Authorization: Bearer <host credential>`); every frame is one JSON text message with `v` (the
 * protocol version) and `type`. Both sides validate every frame with these schemas.
 */
export const PROTOCOL_VERSION = 1;

const v = z.literal(PROTOCOL_VERSION);

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
    if (f.ended === "switch" || f.ended === "transfer") {
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

/**
 * Both ways: bytes of a stream (exec stdin/stdout/stderr, file transfer, port tunnel). `channel`
 * tells stdout from stderr on exec streams. A writer may have at most the credit its reader
 * granted with `window` frames in flight (back-pressure); the initial credit is
 * INITIAL_WINDOW bytes.
 */
export const DataFrame = z.object({
  v,
  type: z.literal("data"),
  stream: z.string(),
  seq: z.number().int().nonnegative(),
  channel: z.enum(["stdin", "stdout", "stderr", "tunnel", "file"]).default("tunnel"),
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

/** Both ways, every HEARTBEAT_MS; a host that misses 3 is offline. */
export const HeartbeatFrame = z.object({ v, type: z.literal("heartbeat"), ts: z.number().int() });

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
export const INITIAL_WINDOW = 256 * 1024;
/** Largest payload of one data frame, before base64. */
export const MAX_DATA_CHUNK = 64 * 1024;

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
