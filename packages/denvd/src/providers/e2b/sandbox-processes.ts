import { DenvError } from "@denv/spec";
import { killAllBut, listBaseline, PROCS } from "../sandbox-procs.js";
import { PROVIDER } from "./check-plan.js";
import { type E2bSandbox, loadE2b } from "./e2b-sdk.js";
import { SYSTEM_PATH } from "./sandbox-user.js";

/**
 * The processes of a sandbox, as root sees them in its /proc: the baseline a sandbox has when it
 * is ready (its services, E2B's own), and the stop of the agent that kills everything else
 * (protection 2's first step). Loaded with the runtime: every new sandbox takes its baseline.
 */

/** A script run as root in the sandbox; its stdout, or a `docker` error naming its stderr. */
export async function asRoot(
  sbx: E2bSandbox,
  script: string,
  envs: Record<string, string> = {},
): Promise<string> {
  const { CommandExitError } = await loadE2b();
  try {
    // A login shell's profile sets root's PATH again: the script sets its own.
    const line = `export PATH=${SYSTEM_PATH}; ${script}`;
    return (await sbx.commands.run(line, { user: "root", cwd: "/", envs, timeoutMs: 0 })).stdout;
  } catch (e) {
    if (e instanceof CommandExitError)
      throw new DenvError("docker", `${PROVIDER}: ${e.stderr.trim() || `exit ${e.exitCode}`}`);
    throw e;
  }
}

/**
 * Every process the sandbox runs now, but those the agent ran in the snapshot the sandbox was
 * made from (a fork resumes them): what is not in it later is the agent's.
 */
export function processBaseline(sbx: E2bSandbox, agents: readonly string[] = []): Promise<string[]> {
  return listBaseline((script, env) => asRoot(sbx, script, env), agents);
}

/**
 * What the agent runs at a snapshot, held still across it: every process not in the baseline is
 * stopped (SIGSTOP, in rounds until a round finds none new: a stopped process forks no more) and
 * listed, so that the list is all the agent had when the provider captured the sandbox. E2B's
 * snapshot keeps memory, so a fork resumes these: its baseline must not count them.
 */
async function holdAgentProcesses(sbx: E2bSandbox, baseline: readonly string[]): Promise<string[]> {
  const script = `${PROCS}
base=" $DENV_BASELINE "; held=" "; round=0
while [ "$round" -lt 50 ]; do
  new=""
  for e in $(procs); do
    case "$base$held" in *" $e "*) continue;; esac
    new="$new $e"; held="$held$e "
  done
  [ -z "$new" ] && break
  for e in $new; do kill -STOP "\${e%%:*}" 2>/dev/null; done
  round=$((round + 1))
done
echo "$held"`;
  return (await asRoot(sbx, script, { DENV_BASELINE: baseline.join(" ") })).split(/\s+/).filter(Boolean);
}

/** Lets processes held by holdAgentProcesses run again, those of them still there (pid and start). */
export async function resumeProcesses(sbx: E2bSandbox, held: readonly string[]): Promise<void> {
  if (held.length === 0) return;
  const script = `${PROCS}
want=" $DENV_HELD "
for e in $(procs); do
  case "$want" in *" $e "*) kill -CONT "\${e%%:*}" 2>/dev/null;; esac
done
true`;
  await asRoot(sbx, script, { DENV_HELD: held.join(" ") });
}

/**
 * A capture (the provider's snapshot) with the agent held still across it, so that the version
 * knows what of the agent a fork resumes; the held processes run on afterwards, capture or not.
 */
export async function whileAgentHeld<T>(
  sbx: E2bSandbox,
  baseline: readonly string[],
  capture: () => Promise<T>,
): Promise<{ result: T; held: string[] }> {
  const held = await holdAgentProcesses(sbx, baseline);
  try {
    return { result: await capture(), held };
  } finally {
    await resumeProcesses(sbx, held);
  }
}

/** Protection 2, first step, in an E2B sandbox (sandbox-procs.ts's killAllBut). */
export function stopAgentProcesses(
  sbx: E2bSandbox,
  baseline: readonly string[],
): Promise<{ killed: number; survivors: number }> {
  return killAllBut((script, env) => asRoot(sbx, script, env), baseline, PROVIDER);
}
