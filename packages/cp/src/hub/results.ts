import {
  type CommandKind,
  type CommandPayloads,
  Environment,
  ExecResponse,
  FilesPutResponse,
  LogsResponse,
  ProbeResult,
  ServiceRef,
  VerifyResponse,
  Version,
} from "@denv/spec";
import { z } from "zod";

/**
 * What denvd returns in `result` frames, per command kind, validated at the boundary. They are
 * the API's resource shapes (snake_case) where one exists, so the cp passes them on unchanged.
 * docs/reference/deployments.md lists them for the sidecar's side.
 */

/** An environment as its host holds it: `id` is `${project}/${host_env}`. */
export const HostEnvironment = z.object({
  id: z.string(),
  status: z.enum(["running", "stopped", "failed"]),
  parent_version: z.string().optional(),
  services: z.array(ServiceRef),
  agent: Environment.shape.agent,
  evidence: z.record(z.string(), z.unknown()).optional(),
});
export type HostEnvironment = z.infer<typeof HostEnvironment>;

/** The cp knows which host holds a version, so the host need not say. */
export const HostVersion = Version.omit({ host_id: true });
export type HostVersion = z.infer<typeof HostVersion>;

/** Hosts say how they encoded output; older ones that do not are read as UTF-8 text. */
export const HostExecResult = ExecResponse.extend({ encoding: ExecResponse.shape.encoding.default("utf8") });

const Done = z.looseObject({});

export const HostResults = {
  "env.deploy": HostEnvironment,
  "env.exec": HostExecResult,
  "env.files.put": FilesPutResponse,
  "env.files.get": z.looseObject({ bytes: z.number().optional() }),
  "env.snapshot": HostVersion,
  "env.fork": HostEnvironment,
  "env.restore": HostEnvironment,
  "env.stop": HostEnvironment,
  "env.start": HostEnvironment,
  "env.destroy": Done,
  "env.probe_egress": ProbeResult,
  "env.verify": VerifyResponse.extend({ snapshot: HostVersion.optional() }),
  "env.logs": LogsResponse,
  "env.connect": Done,
  "version.delete": Done,
  "host.gc": z.looseObject({ removed: z.array(z.string()).optional() }),
} satisfies Record<CommandKind, z.ZodType>;

export type HostResult<K extends CommandKind> = z.output<(typeof HostResults)[K]>;
export type CommandPayload<K extends CommandKind> = z.input<(typeof CommandPayloads)[K]>;
