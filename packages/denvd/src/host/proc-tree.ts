import { readdir, readFile } from "node:fs/promises";

/**
 * Process trees read from the host's /proc. denvd runs on the host as root, so the pids Docker
 * reports (exec inspect, top) are host pids it can signal directly.
 *
 * A host pid names a process only while it lives: once it exits, the kernel hands the number to
 * the next process it starts (pid_max is 32768 on many hosts, so under load a number comes back
 * within minutes). Between listing a container's processes and signalling them, one may exit and
 * its pid go to anything on the host: another environment's sandbox, the engine, denvd itself.
 * So every signal here is scoped to a container: a pid is signalled only while its cgroup is
 * that container's, read the moment before the signal.
 */

export interface ProcStat {
  ppid: number;
  session: number;
  /** Clock ticks after boot at which the process started. */
  startTime: number;
}

export async function statOf(pid: number): Promise<ProcStat | undefined> {
  try {
    const stat = await readFile(`/proc/${pid}/stat`, "utf8");
    // The command name may hold spaces and parens: fields are counted after the last ')'.
    const rest = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return { ppid: Number(rest[1]), session: Number(rest[3]), startTime: Number(rest[19]) };
  } catch {
    return undefined;
  }
}

export async function allPids(): Promise<number[]> {
  const names = await readdir("/proc");
  return names.filter((n) => /^\d+$/.test(n)).map(Number);
}

export async function alive(pid: number): Promise<boolean> {
  try {
    const stat = await readFile(`/proc/${pid}/stat`, "utf8");
    const state = stat.slice(stat.lastIndexOf(")") + 2)[0];
    return state !== "Z" && state !== "X";
  } catch {
    return false;
  }
}

/**
 * `root`, every live descendant of it, and every process of its session. Docker starts an exec
 * as a session leader, so what the exec daemonized (reparented to the container's init) is
 * still found through the session.
 */
export async function descendants(root: number): Promise<number[]> {
  const parents = new Map<number, number>();
  const sameSession: number[] = [];
  await Promise.all(
    (await allPids()).map(async (pid) => {
      const st = await statOf(pid);
      if (st === undefined) return;
      parents.set(pid, st.ppid);
      if (st.session === root) sameSession.push(pid);
    }),
  );
  const children = new Map<number, number[]>();
  for (const [pid, ppid] of parents) {
    const list = children.get(ppid) ?? [];
    list.push(pid);
    children.set(ppid, list);
  }
  const out = new Set<number>();
  const stack = parents.has(root) ? [root, ...sameSession] : [...sameSession];
  while (stack.length > 0) {
    const pid = stack.pop() as number;
    if (out.has(pid)) continue;
    out.add(pid);
    stack.push(...(children.get(pid) ?? []));
  }
  return [...out];
}

/**
 * Whether host pid `pid` is, now, a process of container `containerId`: the engine puts every
 * process of a container (its services, its execs, a gVisor sandbox) in cgroups named after the
 * container's full id, under cgroup v1 (`/docker/<id>`) and v2 (`docker-<id>.scope`) alike.
 */
export async function inContainer(pid: number, containerId: string): Promise<boolean> {
  if (!/^[0-9a-f]{64}$/.test(containerId)) throw new Error(`not a full container id: ${containerId}`);
  const cgroups = await readFile(`/proc/${pid}/cgroup`, "utf8").catch(() => "");
  return cgroups.includes(containerId);
}

/** Signals `pid` only if it is still a process of the container; true when it was signalled. */
async function signal(pid: number, sig: NodeJS.Signals, containerId: string): Promise<boolean> {
  if (!(await inContainer(pid, containerId))) return false;
  try {
    process.kill(pid, sig);
    return true;
  } catch {
    return false; // gone meanwhile
  }
}

/**
 * Kills a process tree of a container without letting it escape: stop everything first (a
 * stopped process cannot fork, so children are not reparented away mid-walk), walk again until
 * the set is stable, then SIGKILL all of it. Only the container's processes are touched: a
 * gVisor exec's root is runsc's proxy on the host, outside the container, and is left to exit
 * with the sandbox's processes.
 */
export async function killTree(root: number, containerId: string): Promise<number[]> {
  const seen = new Set<number>();
  for (let round = 0; round < 10; round++) {
    const tree = await descendants(root);
    const fresh = tree.filter((p) => !seen.has(p));
    if (fresh.length === 0) break;
    for (const p of fresh) {
      seen.add(p);
      await signal(p, "SIGSTOP", containerId);
    }
  }
  const killed: number[] = [];
  for (const p of seen) if (await signal(p, "SIGKILL", containerId)) killed.push(p);
  return killed;
}

/**
 * SIGKILLs the given pids of a container (stopping them first) and reports which are still
 * alive in it afterwards; a pid that is no longer the container's is not touched.
 */
export async function killAll(pids: number[], containerId: string, settleMs = 2000): Promise<number[]> {
  for (const p of pids) await signal(p, "SIGSTOP", containerId);
  for (const p of pids) await signal(p, "SIGKILL", containerId);
  const deadline = Date.now() + settleMs;
  let left = pids;
  while (Date.now() < deadline) {
    const live = async (p: number) => (await alive(p)) && (await inContainer(p, containerId));
    left = (await Promise.all(left.map(async (p) => ((await live(p)) ? p : 0)))).filter((p) => p > 0);
    if (left.length === 0) return [];
    await new Promise((r) => setTimeout(r, 20));
  }
  return left;
}
