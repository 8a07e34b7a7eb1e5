import { access, readFile } from "node:fs/promises";
import { type RunResult, run } from "./run.js";

/**
 * The processes of a container that runs under gVisor (x-denv.agent.sandbox: gvisor), seen and
 * signalled through the host's own `runsc` (never a binary of the environment). Inside gVisor a
 * process is not a host process: the engine's `top` answers with the sandbox's pids (1, 2, ...),
 * which on the host name unrelated processes, so denvd never signals a host pid for such a
 * container. gVisor hands out pids in increasing order, so a pid is not reused within a
 * sandbox's life the way a host pid is.
 */

/** A process in the sandbox, by its sandbox pid. */
export interface SandboxProcess {
  pid: number;
  ppid: number;
}

/**
 * Where the engine's shim keeps runsc's state: the runc shim with `runtimes.<name>.path` uses the
 * runc state root; a runsc shim its own.
 */
const ROOTS = (runtime: string) => [
  "/var/run/docker/runtime-runc/moby",
  `/var/run/docker/runtime-${runtime}/moby`,
  "/run/containerd/runsc/moby",
];

const roots = new Map<string, string>();

/**
 * How long one runsc call may take. runsc talks to the sandbox's control server, which a sandbox
 * that stopped answering would leave waiting for ever: the caller gets an error instead.
 */
const RUNSC_TIMEOUT_MS = 30_000;

async function runsc(args: string[]): Promise<RunResult> {
  const started = Date.now();
  const r = await run("runsc", args, { timeoutMs: RUNSC_TIMEOUT_MS });
  if (r.code !== 0 && Date.now() - started >= RUNSC_TIMEOUT_MS) {
    return { ...r, stderr: `no answer within ${RUNSC_TIMEOUT_MS / 1000} s ${r.stderr}`.trim() };
  }
  return r;
}

/** runsc kill processes at once. */
const KILL_CONCURRENCY = 8;

async function stateRoot(runtime: string, containerId: string): Promise<string> {
  const known = roots.get(containerId);
  if (known) return known;
  for (const root of ROOTS(runtime)) {
    const found = await Promise.any([
      access(`${root}/${containerId}_sandbox:${containerId}.state`),
      access(`${root}/${containerId}/state.json`),
    ]).then(
      () => true,
      () => false,
    );
    if (found) {
      roots.set(containerId, root);
      return root;
    }
  }
  throw new Error(`runsc has no state for container ${containerId} (looked in ${ROOTS(runtime).join(", ")})`);
}

const NOT_RUNNING = /not running|does not exist|stopped/i;

/** How long a sandbox that stopped answering is given to be seen gone before `ps` fails. */
const GONE_WAIT_MS = 5000;

/**
 * Whether the sandbox of a container has exited. Between the sandbox process's death and the
 * shim reaping it and removing runsc's state, `runsc ps` fails with "connecting to control server
 * at PID N: connection refused" while `runsc state` still reads "running"; the sandbox's pid is
 * then gone or a zombie. Only /proc is read: nothing is signalled.
 */
async function sandboxGone(root: string, containerId: string): Promise<boolean> {
  const r = await runsc(["--root", root, "state", containerId]);
  if (r.code !== 0) return NOT_RUNNING.test(r.stderr);
  let state: { status?: string; pid?: number };
  try {
    state = JSON.parse(r.stdout) as typeof state;
  } catch {
    return false;
  }
  if (state.status === "stopped") return true;
  if (typeof state.pid !== "number" || state.pid <= 0) return false;
  const stat = await readFile(`/proc/${state.pid}/stat`, "utf8").catch(() => "");
  const procState = stat.slice(stat.lastIndexOf(")") + 2)[0];
  return stat === "" || procState === "Z" || procState === "X";
}

/**
 * Every process of the sandbox (empty when the container is not running, or its sandbox has
 * exited: a sandbox that died, killed or crashed, has no process left to stop).
 */
export async function sandboxProcesses(runtime: string, containerId: string): Promise<SandboxProcess[]> {
  const root = await stateRoot(runtime, containerId);
  const deadline = Date.now() + GONE_WAIT_MS;
  let r = await runsc(["--root", root, "ps", containerId]);
  while (r.code !== 0) {
    if (NOT_RUNNING.test(r.stderr) || (await sandboxGone(root, containerId))) return [];
    if (Date.now() > deadline) throw new Error(`runsc ps ${containerId}: ${r.stderr.trim()}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
    r = await runsc(["--root", root, "ps", containerId]);
  }
  // UID PID PPID C TTY STIME TIME CMD
  const out: SandboxProcess[] = [];
  for (const line of r.stdout.split("\n").slice(1)) {
    const cols = line.trim().split(/\s+/);
    const pid = Number(cols[1]);
    const ppid = Number(cols[2]);
    if (Number.isInteger(pid) && pid > 0 && Number.isInteger(ppid)) out.push({ pid, ppid });
  }
  return out;
}

/** SIGKILLs sandbox pids; the ones still there afterwards are returned. */
export async function killSandboxProcesses(
  runtime: string,
  containerId: string,
  pids: number[],
  settleMs = 2000,
): Promise<number[]> {
  if (pids.length === 0) return [];
  const root = await stateRoot(runtime, containerId);
  // One runsc per pid (it signals one at a time), a few at once: a fork bomb's thousand pids
  // must not become a thousand host processes.
  const queue = [...pids];
  const worker = async () => {
    for (let pid = queue.shift(); pid !== undefined; pid = queue.shift()) {
      await runsc(["--root", root, "kill", "--pid", String(pid), containerId, "KILL"]);
    }
  };
  await Promise.all(Array.from({ length: Math.min(KILL_CONCURRENCY, queue.length) }, worker));
  const deadline = Date.now() + settleMs;
  for (;;) {
    const live = new Set((await sandboxProcesses(runtime, containerId)).map((p) => p.pid));
    const left = pids.filter((p) => live.has(p));
    if (left.length === 0 || Date.now() > deadline) return left;
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** The pids of `root`'s tree (itself included) in a process list. */
export function treeOf(processes: SandboxProcess[], root: number): number[] {
  const out = [root];
  for (let i = 0; i < out.length; i++) {
    for (const p of processes) if (p.ppid === out[i] && !out.includes(p.pid)) out.push(p.pid);
  }
  return out.filter((pid) => processes.some((p) => p.pid === pid));
}
