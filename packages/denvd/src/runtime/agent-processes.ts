import { readFile } from "node:fs/promises";
import { DenvError, Protection } from "@denv/spec";
import type { DockerClient } from "../docker/docker-client.js";
import { killAll } from "../host/proc-tree.js";
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

/** Every process of every service, as the baseline of a ready environment. */
export async function captureBaseline(
  docker: DockerClient,
  rec: EnvironmentRecord,
): Promise<EnvironmentRecord["baseline"]> {
  const out: EnvironmentRecord["baseline"] = {};
  for (const [svc, id] of Object.entries(rec.containers)) {
    const pids = await docker.containers.processes(id);
    out[svc] = await Promise.all(pids.map(async (p): Promise<[number, number]> => [p, await startTime(p)]));
  }
  return out;
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
  const extras = async (): Promise<number[]> => {
    const out: number[] = [];
    for (const [svc, id] of Object.entries(rec.containers)) {
      const base = baseline.get(svc) ?? new Set<string>();
      for (const p of await docker.containers.processes(id)) {
        if (!base.has(`${p}:${await startTime(p)}`)) out.push(p);
      }
    }
    return out;
  };
  // Rounds, until Docker's own view of the containers shows nothing extra: a process that
  // forked between a listing and its signal is caught by the next round, and so is a
  // healthcheck the engine started meanwhile (harmless to kill; it is not the agent's).
  let killed = 0;
  for (let round = 0; round < 10; round++) {
    const found = await extras();
    if (found.length === 0) return { killed, survivors: 0 };
    const survivors = await killAll(found);
    if (survivors.length > 0)
      throw new DenvError("agent_survived", Protection.agentSurvived(survivors.length));
    killed += found.length;
  }
  const left = await extras();
  if (left.length > 0) throw new DenvError("agent_survived", Protection.agentSurvived(left.length));
  return { killed, survivors: 0 };
}
