import { DenvError } from "@denv/spec";
import { signalAllBut } from "../sandbox-procs.js";
import { type PrimeHost, provider } from "./prime-host.js";
import type { PrimeEnvironmentRecord, PrimeVersionRecord } from "./prime-records.js";
import { asRoot } from "./prime-shell.js";

/** How a Prime version was captured, as its evidence says. */
export const METHOD = "prime-checkpoint";

/**
 * A version of an environment: a Prime checkpoint of each of its sandboxes' root filesystems (no
 * memory, no processes: a fork starts the services anew), each waited for until DURABLE, the
 * state in which Prime restores it and keeps it should the sandbox go, then recorded as
 * PROJECT@vN.
 */
export async function captureVersion(
  host: PrimeHost,
  rec: PrimeEnvironmentRecord,
  o: { number: number; command: string },
): Promise<PrimeVersionRecord> {
  const id = `${rec.project}@v${o.number}`;
  if (await host.records.getVersion(id)) throw new DenvError("conflict", `version ${id} exists`);
  const started = Date.now();
  host.inFlight.add(o.command);
  try {
    const sandboxes: Record<string, string> = { [rec.plan.agent.service]: rec.sandboxId };
    for (const [service, peer] of Object.entries(rec.peers ?? {})) sandboxes[service] = peer.sandboxId;
    let checkpoints: Record<string, string> = {};
    const frozenMs = await frozen(host, rec, async () => {
      const made = Object.entries(sandboxes).map(
        async ([service, sandboxId]) => [service, await checkpoint(host, sandboxId)] as const,
      );
      checkpoints = Object.fromEntries(await Promise.all(made));
    });
    const { [rec.plan.agent.service]: agentCheckpoint, ...peerCheckpoints } = checkpoints;
    const took = Date.now() - started;
    const v: PrimeVersionRecord = {
      id,
      project: rec.project,
      number: o.number,
      checkpointId: agentCheckpoint as string,
      ...(Object.keys(peerCheckpoints).length > 0 ? { peerCheckpoints } : {}),
      sourceEnvironment: rec.id,
      ...(rec.parentVersion ? { parentVersion: rec.parentVersion } : {}),
      plan: rec.plan,
      ...(rec.imageDefaults ? { imageDefaults: rec.imageDefaults } : {}),
      ...(rec.verifierImage ? { verifierImage: rec.verifierImage } : {}),
      agent: rec.agent,
      command: o.command,
      ...(rec.testsTar ? { testsTar: rec.testsTar } : {}),
      timings: {
        snapshot_ms: took,
        ...(frozenMs !== undefined ? { frozen_ms: frozenMs } : {}),
        total_ms: Date.now() - started,
      },
      createdAt: new Date(started).toISOString(),
    };
    await host.records.putVersion(v);
    return v;
  } finally {
    host.inFlight.delete(o.command);
  }
}

/** A DURABLE checkpoint of the sandbox, checked to be of that sandbox: its id. */
async function checkpoint(host: PrimeHost, sandboxId: string): Promise<string> {
  const made = await provider(() => host.api.createCheckpoint(sandboxId));
  const durable = await provider(() => host.api.waitCheckpoint(made.id));
  // What Prime reports is checked against what was asked: a checkpoint of this sandbox.
  if (durable.sandboxId !== sandboxId) {
    throw new DenvError(
      "docker",
      `Prime: checkpoint ${made.id} is of sandbox ${durable.sandboxId}, not ${sandboxId}`,
    );
  }
  return durable.id;
}

/**
 * Runs `capture` with every sandbox's processes stopped but its own (Prime has no pause), when
 * the environment has several: the checkpoints then hold one moment of all services. Every
 * sandbox is resumed after, whatever `capture` did. Returns how long the window was (ms), or
 * undefined when nothing was stopped (one sandbox: its checkpoint is one moment by itself).
 */
async function frozen(
  host: PrimeHost,
  rec: PrimeEnvironmentRecord,
  capture: () => Promise<void>,
): Promise<number | undefined> {
  const keep = rec.systemProcs;
  if (!keep) {
    await capture();
    return undefined;
  }
  const sandboxes = Object.keys(keep);
  const start = Date.now();
  try {
    // All at once, and every one settled before a resume (a late STOP would outlive the window).
    const stopped = await Promise.allSettled(
      sandboxes.map((sandbox) => signalAllBut(asRoot(host, sandbox), keep[sandbox] ?? [], "STOP")),
    );
    const failed = stopped.find((r) => r.status === "rejected");
    if (failed) throw failed.reason;
    await capture();
  } finally {
    const resumed = await Promise.allSettled(
      sandboxes.map((sandbox) => signalAllBut(asRoot(host, sandbox), keep[sandbox] ?? [], "CONT")),
    );
    for (const r of resumed)
      if (r.status === "rejected") host.log(`${rec.id}: resuming failed: ${String(r.reason)}`);
  }
  return Date.now() - start;
}
