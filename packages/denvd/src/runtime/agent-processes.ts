import { readFile } from "node:fs/promises";
import { DenvError, Protection } from "@denv/spec";
import type { DockerClient } from "../docker/docker-client.js";
import { killAll } from "../host/proc-tree.js";
import { killSandboxProcesses, sandboxProcesses } from "../host/runsc.js";
import type { EnvironmentRecord } from "../records.js";

/**
 * Agent processes are the ones that were not running when the environment became ready: exec
 * sessions, their descendants, whatever they daemonized. A process is known by its host pid and
 * its start time, so a recycled pid is not mistaken for a baseline one.
 */

async function startTime(pid: number): Promise<number> {
  try {
    const stat = await readFile(`/proc/${pid}/stat`, "utf8");
    return Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[19]);
  } catch {
    return -1;
  }
}

/** The engine runtime of a service's container when it is sandboxed (gVisor), else undefined. */
export function sandboxRuntimeOf(rec: EnvironmentRecord, service: string): string | undefined {
  return service === rec.plan.agent.service ? rec.agentRuntime : undefined;
}

/** Every process of every service, as the baseline of a ready environment (services at once). */
export async function captureBaseline(
  docker: DockerClient,
  rec: EnvironmentRecord,
): Promise<EnvironmentRecord["baseline"]> {
  const lists = await Promise.all(
    Object.entries(rec.containers).map(async ([svc, id]): Promise<[string, Array<[number, number]>]> => {
      const runtime = sandboxRuntimeOf(rec, svc);
      if (runtime !== undefined) {
        return [svc, (await sandboxProcesses(runtime, id)).map((p): [number, number] => [p.pid, 0])];
      }
      const pids = await docker.containers.processes(id);
      return [
        svc,
        await Promise.all(pids.map(async (p): Promise<[number, number]> => [p, await startTime(p)])),
      ];
    }),
  );
  return Object.fromEntries(lists);
}

/**
 * Protection 2, first step: kills every process that is not in the baseline, then confirms
 * none is left.
 */
export async function stopAgent(
  docker: DockerClient,
  rec: EnvironmentRecord,
): Promise<{ killed: number; survivors: number }> {
  const baseline = new Map(
    Object.entries(rec.baseline).map(([svc, list]) => [svc, new Set(list.map(([p, t]) => `${p}:${t}`))]),
  );
  // A sandboxed service's processes are gVisor's, killed through runsc (never a host pid), in
  // rounds like the host's: what forked between a listing and its kill is caught by the next.
  let sandboxKilled = 0;
  for (const [svc, id] of Object.entries(rec.containers)) {
    const runtime = sandboxRuntimeOf(rec, svc);
    if (runtime === undefined) continue;
    const base = baseline.get(svc) ?? new Set<string>();
    const extra = async () =>
      (await sandboxProcesses(runtime, id)).map((p) => p.pid).filter((p) => !base.has(`${p}:0`));
    for (let round = 0, found = await extra(); found.length > 0; round++, found = await extra()) {
      if (round === 10) throw new DenvError("agent_survived", Protection.agentSurvived(found.length));
      const left = await killSandboxProcesses(runtime, id, found);
      if (left.length > 0) throw new DenvError("agent_survived", Protection.agentSurvived(left.length));
      sandboxKilled += found.length;
    }
  }
  // Host pids, each with the container it was listed in: a pid is signalled only while it is
  // still that container's (proc-tree.ts says why).
  const extras = async (): Promise<Array<[string, number]>> => {
    const out: Array<[string, number]> = [];
    for (const [svc, id] of Object.entries(rec.containers)) {
      if (sandboxRuntimeOf(rec, svc) !== undefined) continue;
      const base = baseline.get(svc) ?? new Set<string>();
      for (const p of await docker.containers.processes(id)) {
        if (!base.has(`${p}:${await startTime(p)}`)) out.push([id, p]);
      }
    }
    return out;
  };
  const killFound = async (found: Array<[string, number]>): Promise<number> => {
    let survivors = 0;
    for (const id of new Set(found.map(([c]) => c))) {
      survivors += (
        await killAll(
          found.filter(([c]) => c === id).map(([, p]) => p),
          id,
        )
      ).length;
    }
    return survivors;
  };
  // Rounds, until Docker's own view of the containers shows nothing extra: a process that
  // forked between a listing and its signal is caught by the next round, and so is a
  // healthcheck the engine started meanwhile (harmless to kill; it is not the agent's).
  let killed = sandboxKilled;
  for (let round = 0; round < 10; round++) {
    const found = await extras();
    if (found.length === 0) return { killed, survivors: 0 };
    const survivors = await killFound(found);
    if (survivors > 0) throw new DenvError("agent_survived", Protection.agentSurvived(survivors));
    killed += found.length;
  }
  const left = await extras();
  if (left.length > 0) throw new DenvError("agent_survived", Protection.agentSurvived(left.length));
  return { killed, survivors: 0 };
}
