import { z } from "zod";
import {
  AgentRef,
  ExecResponse,
  FilesPutResponse,
  LogsResponse,
  ServiceRef,
  VerifyResponse,
  Version,
} from "../api.js";
import type { CommandKind } from "./commands.js";
import { EgressProbe, EnvironmentEvidence, VerifyEvidence } from "./evidence.js";
import { TransferEvidence } from "./transfer.js";

/**
 * What a host returns in `result` frames, per command kind. denvd's handlers are typed by these
 * (they return `z.input`) and denvd checks its result before sending it; the control plane parses
 * it with the same schema (and gets `z.output`). They are the API's shapes (snake_case) where
 * one exists. docs/reference/protocol.md shows one of each.
 */

/**
 * An environment as its host holds it: `id` is `PROJECT/ENV` on the host (for the control plane,
 * `PROJECT/<host env>`). Not the API's `Environment`, which the control plane serves: that one
 * has the client's name, the version, the sandbox fields, and no network.
 */
export const HostEnvironment = z.object({
  id: z.string(),
  project: z.string(),
  name: z.string(),
  status: z.enum(["running", "stopped", "failed"]),
  /** The version it was forked from (absent for a deploy). */
  parent_version: z.string().optional(),
  agent: AgentRef,
  services: z.array(ServiceRef),
  network: z.object({ id: z.string(), name: z.string(), subnet: z.string(), gateway: z.string() }),
  evidence: EnvironmentEvidence,
});
export type HostEnvironment = z.infer<typeof HostEnvironment>;

/** Hosts say how they encoded output; older ones that do not are read as UTF-8 text. */
export const HostExecResult = ExecResponse.extend({
  encoding: ExecResponse.shape.encoding.default("utf8"),
  /** A streamed exec's byte counts (its output went out on the stream, not in the result). */
  streamed: z
    .object({
      stdin_bytes: z.number().int(),
      stdout_bytes: z.number().int(),
      stderr_bytes: z.number().int(),
      /** The most output the host held while waiting for the reader's credit. */
      max_buffered_bytes: z.number().int(),
    })
    .optional(),
  /** false: a result answered from the host's journal, which keeps no output. */
  output_kept: z.boolean().optional(),
});

/** The verify's grade with its evidence, and the episode's snapshot (the cp records it). */
export const HostVerifyResult = VerifyResponse.extend({ evidence: VerifyEvidence, snapshot: Version });
export type HostVerifyResult = z.infer<typeof HostVerifyResult>;

export const FilesPutResult = FilesPutResponse.extend({ path: z.string() });
export const FilesGetResult = z.object({ path: z.string(), bytes: z.number().int() });
export const DestroyResult = z.object({ environment: z.string(), destroyed: z.literal(true) });
export const VersionDeleteResult = z.object({ version: z.string(), deleted: z.literal(true) });
/** A tunnel's result, when its connection closed (`error`: why, if it broke). */
export const TunnelResult = z.object({
  service: z.string(),
  port: z.number().int(),
  address: z.string(),
  bytes_to_service: z.number().int(),
  bytes_from_service: z.number().int(),
  error: z.string().optional(),
});
/** What the holder sent of a version (the receiver's result is the one that counts). */
export const VersionSendResult = z.object({
  version: z.string(),
  bytes: z.number().int(),
  records: z.number().int(),
  parts: z.array(z.string()),
});
/** The version as the receiver registered it, and how it got there. */
export const VersionReceiveResult = Version.extend({ transfer: TransferEvidence });

/** What the host removed that no record owned. */
export const GcResult = z.object({ removed: z.array(z.string()) });

export const CommandResults = {
  "env.deploy": HostEnvironment,
  "env.exec": HostExecResult,
  "env.files.put": FilesPutResult,
  "env.files.get": FilesGetResult,
  /** `host_id` is the host's own id; the control plane sets it from where it sent the command. */
  "env.snapshot": Version,
  "env.fork": HostEnvironment,
  "env.restore": HostEnvironment,
  "env.stop": HostEnvironment,
  "env.start": HostEnvironment,
  "env.destroy": DestroyResult,
  "env.probe_egress": EgressProbe,
  "env.verify": HostVerifyResult,
  "env.logs": LogsResponse,
  "env.connect": TunnelResult,
  "version.delete": VersionDeleteResult,
  "version.send": VersionSendResult,
  "version.receive": VersionReceiveResult,
  "host.gc": GcResult,
} satisfies Record<CommandKind, z.ZodType>;

/** A validated result of kind K, as the control plane gets it. */
export type CommandResult<K extends CommandKind> = z.output<(typeof CommandResults)[K]>;
