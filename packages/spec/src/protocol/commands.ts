import { z } from "zod";
import { ExecRequest } from "../exec.js";
import { type PhaseName, Phases } from "../phases.js";
import { DirectReceive, DirectSend, TransferResume } from "./transfer.js";

/** What the control plane asks of a host; each kind has a payload and a result schema. */
export const CommandKind = z.enum([
  "env.deploy",
  "env.exec",
  "env.files.put",
  "env.files.get",
  "env.snapshot",
  "env.fork",
  "env.restore",
  "env.stop",
  "env.start",
  "env.destroy",
  "env.probe_egress",
  "env.verify",
  "env.logs",
  "env.connect",
  "version.delete",
  "version.send",
  "version.receive",
  "host.gc",
]);
export type CommandKind = z.infer<typeof CommandKind>;

// ---- command payloads (cp -> host) ----

export const EnvRefPayload = z.object({ environment: z.string() });

export const CommandPayloads = {
  /** `source_stream`: a data stream carrying a tar of the project; the host extracts it to a
   * temporary directory it removes after the build. Or `git`: the host fetches the commit over
   * git smart HTTP itself (`authorization` is the HTTP header value, an installation token that
   * expires within the hour; never journalled) and handles its tree as it would an upload. */
  "env.deploy": z.object({
    project: z.string(),
    environment: z.string(),
    source_stream: z.string().optional(),
    git: z
      .object({
        url: z.string(),
        ref: z.string(),
        authorization: z.string().optional(),
        max_bytes: z.number().int().positive().optional(),
      })
      .optional(),
    compose_file: z.string().optional(),
    /** The project's kind as its admin set it: the host refuses a file that asks for another. */
    kind: z.enum(["rl-environment", "service"]).optional(),
  }),
  /** With `stream`, stdin arrives on it (channel stdin) and output leaves on it as it is
   * produced (channels stdout/stderr); the result then carries no output bytes. */
  "env.exec": z.object({ environment: z.string(), exec: ExecRequest, stream: z.string().optional() }),
  "env.files.put": z.object({
    environment: z.string(),
    path: z.string(),
    service: z.string().optional(),
    user: z.string().optional(),
    stream: z.string(),
  }),
  "env.files.get": z.object({
    environment: z.string(),
    path: z.string(),
    service: z.string().optional(),
    user: z.string().optional(),
    stream: z.string(),
  }),
  /** `number`: the version number the control plane allocated (it numbers versions across
   * hosts); absent, the host takes the next free number of the project. */
  "env.snapshot": EnvRefPayload.extend({ number: z.number().int().positive().optional() }),
  "env.fork": z.object({ version: z.string(), name: z.string() }),
  /** Replace `environment` with a fork of `version` under the same name (rollback). */
  "env.restore": z.object({ environment: z.string(), version: z.string() }),
  "env.stop": EnvRefPayload,
  "env.start": EnvRefPayload,
  "env.destroy": EnvRefPayload,
  "env.probe_egress": EnvRefPayload,
  /**
   * `number`: the version number the episode's snapshot takes (the cp numbers versions).
   * `version`: a smoke verify instead (x-denv.verifier.smoke): that version of the environment's
   * project is graded untouched on a fork of it; no agent is stopped and nothing is snapshotted.
   */
  "env.verify": z.object({
    environment: z.string(),
    number: z.number().int().positive().optional(),
    version: z.string().optional(),
  }),
  "env.logs": z.object({
    environment: z.string(),
    service: z.string().optional(),
    tail: z.number().int().optional(),
  }),
  /** A TCP tunnel to service:port inside the environment, over `stream` (channel tunnel). */
  "env.connect": z.object({
    environment: z.string(),
    service: z.string(),
    port: z.number().int(),
    stream: z.string(),
  }),
  "version.delete": z.object({ version: z.string() }),
  /**
   * The holder of a version streams it (docs/reference/protocol.md#version-transfer) on `stream`,
   * from `resume`: the receiver's answer to "what do you have already". With `direct`, the
   * records go on a connection to the receiver instead (the stream then carries none).
   */
  "version.send": z.object({
    version: z.string(),
    stream: z.string(),
    resume: TransferResume,
    direct: DirectSend.optional(),
  }),
  /**
   * The receiver writes its resume point (one JSON line) on `stream`, then reads the version's
   * records from it and registers the version once every part checked out. `from`: the sender.
   * With `direct`, the records come on the one connection to this host's transfer listener that
   * presents the ticket (the stream still carries the resume point, and the cp's word to stop).
   */
  "version.receive": z.object({
    version: z.string(),
    stream: z.string(),
    from: z.string(),
    direct: DirectReceive.optional(),
  }),
  "host.gc": z.object({}),
} satisfies Record<CommandKind, z.ZodType>;

/** What the control plane may give `send` for kind K (defaults not yet applied). */
export type CommandPayload<K extends CommandKind> = z.input<(typeof CommandPayloads)[K]>;

// ---- the phases each command reports (progress frames), in order ----

const MATERIALIZE = ["place", "restore", "start", "health", "probe"] as const satisfies readonly PhaseName[];

/**
 * The phases a host reports while it runs each kind, in the order it runs them (`probe` only
 * where egress is denied; `restore` only for forks). The control plane maps those that are
 * phases of the deployment onto it; the others become log lines.
 */
export const HostPhases = {
  "env.deploy": ["resolve source", "validate", "build", "place", "start", "health", "probe"],
  "env.exec": [],
  "env.files.put": [],
  "env.files.get": [],
  "env.snapshot": ["freeze", "capture layers", "capture volumes", "thaw", "record"],
  "env.fork": MATERIALIZE,
  "env.restore": MATERIALIZE,
  "env.stop": Phases.stop,
  "env.start": Phases.start,
  "env.destroy": Phases.destroy,
  "env.probe_egress": [],
  "env.verify": Phases.verify,
  "env.logs": [],
  "env.connect": ["connect", "connected"],
  "version.delete": [],
  "version.send": [],
  "version.receive": [],
  "host.gc": [],
} satisfies Record<CommandKind, readonly PhaseName[]>;
