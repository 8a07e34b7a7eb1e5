import type { Readable } from "node:stream";
import { DenvError } from "@denv/spec";
import type { DockerClient } from "../docker/docker-client.js";
import { type RawExecResult, type RunExecOptions, runExec } from "../exec-runner.js";
import { statOf } from "../host/proc-tree.js";
import { killSandboxProcesses, sandboxProcesses, treeOf } from "../host/runsc.js";
import type { EnvironmentRecord } from "../records.js";
import { sandboxRuntimeOf } from "./agent-processes.js";
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
  const { containerId } = principal;
  const runtime = sandboxRuntimeOf(rec, principal.service);
  const sandbox = runtime === undefined ? undefined : await SandboxExec.before(runtime, containerId);
  let root = 0;
  try {
    return await runExec(docker, {
      containerId,
      onStart: (pid) => {
        root = pid;
        const live = liveExecs.get(containerId) ?? new Set<number>();
        live.add(pid);
        liveExecs.set(containerId, live);
        sandbox?.started();
      },
      escapees: async (execRoot, rootStart) => {
        if (sandbox) {
          const alone = (liveExecs.get(containerId)?.size ?? 0) <= 1;
          await sandbox.kill(rec.baseline[principal.service] ?? [], alone);
          return [];
        }
        return escapees(docker, containerId, rec.baseline[principal.service] ?? [], execRoot, rootStart);
      },
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
  } finally {
    sandbox?.done();
    liveExecs.get(containerId)?.delete(root);
    if (liveExecs.get(containerId)?.size === 0) liveExecs.delete(containerId);
  }
}

/** Roots of the execs running in each container (each is the leader of its own session). */
const liveExecs = new Map<string, Set<number>>();

/**
 * What an exec left behind outside its tree and session (`setsid`, a double fork reparented to
 * the container's init): the container's processes started after the exec's root, in a session
 * that is neither the baseline's (the services and what they fork) nor another live exec's.
 */
async function escapees(
  docker: DockerClient,
  containerId: string,
  baseline: Array<[number, number]>,
  root: number,
  rootStart: number,
): Promise<number[]> {
  const keep = new Set<number>();
  for (const [pid] of baseline) {
    const st = await statOf(pid);
    if (st) keep.add(st.session);
  }
  for (const other of liveExecs.get(containerId) ?? []) if (other !== root) keep.add(other);
  const out: number[] = [];
  for (const pid of await docker.containers.processes(containerId)) {
    const st = await statOf(pid);
    if (st && pid !== root && st.startTime >= rootStart && !keep.has(st.session)) out.push(pid);
  }
  return out;
}

/** Sandbox roots (pid, container) already claimed by a live exec. */
const claimedRoots = new Set<string>();

/**
 * An exec in a gVisor container, whose processes are gVisor's: the engine reports the host pid
 * of runsc's proxy, not of the command. The exec's own processes are found in the sandbox: its
 * root is a new parentless process that appeared once it started (claimed so that a concurrent
 * exec does not take it), and what it left behind are processes newer than its start.
 */
class SandboxExec {
  private roots: number[] = [];
  private claiming: Promise<void> | undefined;

  private constructor(
    private readonly runtime: string,
    private readonly containerId: string,
    private readonly before: ReadonlySet<number>,
  ) {}

  static async before(runtime: string, containerId: string): Promise<SandboxExec> {
    const pids = new Set((await sandboxProcesses(runtime, containerId)).map((p) => p.pid));
    return new SandboxExec(runtime, containerId, pids);
  }

  started(): void {
    this.claiming = (async () => {
      for (const p of await sandboxProcesses(this.runtime, this.containerId)) {
        const key = `${this.containerId}:${p.pid}`;
        if (p.ppid === 0 && !this.before.has(p.pid) && !claimedRoots.has(key)) {
          claimedRoots.add(key);
          this.roots.push(p.pid);
        }
      }
    })().catch(() => undefined);
  }

  /** Kills the exec's tree and, when no other exec runs there, every process newer than it. */
  async kill(baseline: Array<[number, number]>, alone: boolean): Promise<void> {
    await this.claiming;
    const all = await sandboxProcesses(this.runtime, this.containerId);
    const keep = new Set(baseline.map(([p]) => p));
    const doomed = new Set(this.roots.flatMap((r) => treeOf(all, r)));
    if (alone) for (const p of all) if (!this.before.has(p.pid) && !keep.has(p.pid)) doomed.add(p.pid);
    await killSandboxProcesses(this.runtime, this.containerId, [...doomed]);
  }

  done(): void {
    for (const r of this.roots) claimedRoots.delete(`${this.containerId}:${r}`);
  }
}
