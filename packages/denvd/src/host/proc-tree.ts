import { readdir, readFile } from "node:fs/promises";

/**
 * Process trees read from the host's /proc. denvd runs on the host as root, so the pids Docker
 * reports (exec inspect, top) are host pids it can signal directly.
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

function signal(pid: number, sig: NodeJS.Signals): void {
  try {
    process.kill(pid, sig);
  } catch {
    // already gone
  }
}

/**
 * Kills a process tree without letting it escape: stop everything first (a stopped process
 * cannot fork, so children are not reparented away mid-walk), walk again until the set is
 * stable, then SIGKILL all of it.
 */
export async function killTree(root: number): Promise<number[]> {
  const seen = new Set<number>();
  for (let round = 0; round < 10; round++) {
    const tree = await descendants(root);
    const fresh = tree.filter((p) => !seen.has(p));
    if (fresh.length === 0) break;
    for (const p of fresh) {
      seen.add(p);
      signal(p, "SIGSTOP");
    }
  }
  for (const p of seen) signal(p, "SIGKILL");
  return [...seen];
}

/** SIGKILLs the given pids (stopping them first) and reports which are still alive afterwards. */
export async function killAll(pids: number[], settleMs = 2000): Promise<number[]> {
  for (const p of pids) signal(p, "SIGSTOP");
  for (const p of pids) signal(p, "SIGKILL");
  const deadline = Date.now() + settleMs;
  let left = pids;
  while (Date.now() < deadline) {
    left = (await Promise.all(left.map(async (p) => ((await alive(p)) ? p : 0)))).filter((p) => p > 0);
    if (left.length === 0) return [];
    await new Promise((r) => setTimeout(r, 20));
  }
  return left;
}
