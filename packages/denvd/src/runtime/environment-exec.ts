import type { Readable } from "node:stream";
import { DenvError } from "@denv/spec";
import type { DockerClient } from "../docker/docker-client.js";
import { type RawExecResult, type RunExecOptions, runExec } from "../exec-runner.js";
import type { EnvironmentRecord } from "../records.js";
import { principalFor } from "./principals.js";

export interface ExecOptions {
  cmd?: string[];
  shell?: string;
  service?: string;
  user?: string;
  cwd?: string;
  env?: Record<string, string>;
  stdin?: Buffer | Readable;
  /** Seconds. */
  timeout?: number;
  tty?: boolean;
  outputLimit?: number;
  onStdout?: (chunk: Buffer) => void;
  onStderr?: (chunk: Buffer) => void;
  /** Back-pressure for streaming callers (see RunExecOptions.onFlow). */
  onFlow?: RunExecOptions["onFlow"];
  /** false: output is only streamed, not kept in the result. */
  collect?: boolean;
  /** Aborting kills the exec's process tree. */
  signal?: AbortSignal;
}

/** One command in a service of an environment, as the exec contract says (protection 1 first). */
export async function execInEnvironment(
  docker: DockerClient,
  rec: EnvironmentRecord,
  o: ExecOptions,
): Promise<RawExecResult> {
  const principal = await principalFor(docker, rec, { service: o.service, user: o.user });
  if ((o.cmd === undefined) === (o.shell === undefined)) {
    throw new DenvError(
      "invalid_request",
      "give exactly one of 'cmd' (argv) and 'shell' (a string for sh -c)",
    );
  }
  return runExec(docker, {
    containerId: principal.containerId,
    argv: o.cmd ?? ["sh", "-c", o.shell as string],
    user: principal.user,
    cwd: o.cwd ?? (principal.isAgent ? rec.plan.agent.workdir : undefined),
    env: o.env,
    stdin: o.stdin,
    timeoutMs: o.timeout !== undefined ? Math.round(o.timeout * 1000) : undefined,
    tty: o.tty,
    outputLimit: o.outputLimit,
    onStdout: o.onStdout,
    onStderr: o.onStderr,
    onFlow: o.onFlow,
    collect: o.collect,
    signal: o.signal,
  });
}
