import { DenvError, Protection } from "@denv/spec";

/**
 * The processes of a sandbox as root sees them in its /proc, for any provider that runs a script
 * as root in it (`AsRoot`): the baseline a sandbox has when it is ready (its services, the
 * provider's own), and the stop of the agent that kills everything else (protection 2's first
 * step).
 */

/** A script run as root in the sandbox with the given environment: its stdout. */
export type AsRoot = (script: string, env?: Record<string, string>) => Promise<string>;

/** PF_KTHREAD in /proc/PID/stat's flags: kernel threads are nobody's to kill. */
const PF_KTHREAD = 0x200000;

/**
 * A shell function `procs` listing every process as "pid:start time", but kernel threads, zombies
 * and the listing shell itself (its pid and its children). Start times tell a recycled pid apart.
 */
export const PROCS = `procs() {
  for d in /proc/[0-9]*; do
    p=\${d#/proc/}; [ "$p" = "$$" ] && continue
    { read -r line < "$d/stat"; } 2>/dev/null || continue
    set -- \${line##*") "}
    [ "$1" = Z ] || [ "$2" = "$$" ] || [ "$2" = 2 ] || [ "$p" = 2 ] && continue
    [ $(( $7 & ${PF_KTHREAD} )) -ne 0 ] && continue
    echo "$p:\${20}"
  done
}`;

/** Every process the sandbox runs now, but `agents` (the agent's, resumed from a snapshot). */
export async function listBaseline(asRoot: AsRoot, agents: readonly string[] = []): Promise<string[]> {
  const theirs = new Set(agents);
  return (await asRoot(`${PROCS}\nprocs`)).split("\n").filter((e) => e !== "" && !theirs.has(e));
}

/**
 * Protection 2, first step: kills, as root in the sandbox, every process not in the baseline, in
 * rounds until none is left (what forked between a listing and its kill is caught by the next).
 *
 * @throws DenvError `agent_survived` when processes are still there after ten rounds.
 */
export async function killAllBut(
  asRoot: AsRoot,
  baseline: readonly string[],
  provider: string,
): Promise<{ killed: number; survivors: number }> {
  const script = `${PROCS}
base=" $DENV_BASELINE "; killed=0; round=0
while :; do
  found=""; n=0
  for e in $(procs); do
    case "$base" in *" $e "*) continue;; esac
    found="$found \${e%%:*}"; n=$((n + 1))
  done
  [ "$n" -eq 0 ] && { echo "killed $killed 0"; exit 0; }
  [ "$round" -ge 10 ] && { echo "killed $killed $n"; exit 0; }
  kill -9 $found 2>/dev/null
  killed=$((killed + n)); round=$((round + 1)); sleep 0.1
done`;
  const out = (await asRoot(script, { DENV_BASELINE: baseline.join(" ") })).trim();
  const m = /^killed (\d+) (\d+)$/.exec(out);
  if (!m) throw new DenvError("docker", `${provider}: stopping the agent said '${out.slice(0, 200)}'`);
  const survivors = Number(m[2]);
  if (survivors > 0) throw new DenvError("agent_survived", Protection.agentSurvived(survivors));
  return { killed: Number(m[1]), survivors };
}

/**
 * Sends `signal` (STOP or CONT), as root in the sandbox, to every process not in `keep`: STOP in
 * three rounds (what forked between a listing and its signal is caught by the next), CONT in one.
 * A multi-sandbox snapshot's frozen window: every sandbox stopped before the first checkpoint,
 * resumed after the last.
 */
export async function signalAllBut(
  asRoot: AsRoot,
  keep: readonly string[],
  signal: "STOP" | "CONT",
): Promise<void> {
  const rounds = signal === "STOP" ? 3 : 1;
  await asRoot(
    `${PROCS}
base=" $DENV_KEEP "; round=0
while [ "$round" -lt ${rounds} ]; do
  found=""
  for e in $(procs); do
    case "$base" in *" $e "*) continue;; esac
    found="$found \${e%%:*}"
  done
  [ -n "$found" ] && kill -${signal} $found 2>/dev/null
  round=$((round + 1))
done
true`,
    { DENV_KEEP: keep.join(" ") },
  );
}
