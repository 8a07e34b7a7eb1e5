import { DenvError } from "@denv/spec";
import { type PrimeHost, provider } from "./prime-host.js";
import type { PrimeEnvironmentRecord, PrimeVersionRecord } from "./prime-records.js";

/** How a Prime version was captured, as its evidence says. */
export const METHOD = "prime-checkpoint";

/**
 * A version of an environment: a Prime checkpoint of its sandbox's root filesystem (no memory,
 * no processes: a fork starts the service anew), waited for until DURABLE, the state in which
 * Prime restores it and keeps it should the sandbox go, then recorded as PROJECT@vN.
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
    const made = await provider(() => host.api.createCheckpoint(rec.sandboxId));
    const durable = await provider(() => host.api.waitCheckpoint(made.id));
    // What Prime reports is checked against what was asked: a checkpoint of this sandbox.
    if (durable.sandboxId !== rec.sandboxId) {
      throw new DenvError(
        "docker",
        `Prime: checkpoint ${made.id} is of sandbox ${durable.sandboxId}, not ${rec.sandboxId}`,
      );
    }
    const took = Date.now() - started;
    const v: PrimeVersionRecord = {
      id,
      project: rec.project,
      number: o.number,
      checkpointId: durable.id,
      sourceEnvironment: rec.id,
      ...(rec.parentVersion ? { parentVersion: rec.parentVersion } : {}),
      plan: rec.plan,
      agent: rec.agent,
      command: o.command,
      ...(rec.testsTar ? { testsTar: rec.testsTar } : {}),
      timings: { snapshot_ms: took, total_ms: Date.now() - started },
      createdAt: new Date(started).toISOString(),
    };
    await host.records.putVersion(v);
    return v;
  } finally {
    host.inFlight.delete(o.command);
  }
}
