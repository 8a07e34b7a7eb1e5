import { DenvError } from "@denv/spec";
import type { Sandbox } from "modal";
import type { ModalEnvironmentRecord, ModalRecords, ModalVersionRecord } from "./modal-records.js";

/** How a Modal version was captured, as its evidence says. */
export const METHOD = "modal-filesystem-snapshot";

/** How long a snapshot may take (the SDK's own default budget is 55 s). */
const SNAPSHOT_TIMEOUT_MS = 10 * 60_000;

/**
 * A version of an environment: Modal's filesystem snapshot of its sandbox (the SDK's
 * `snapshotFilesystem`, an image Modal keeps; no memory, no processes: a fork starts the service
 * anew), asked to be kept without expiry (`ttlMs: null`: Modal's default is 30 days, and a version
 * lives until denv deletes it), then recorded as PROJECT@vN. A snapshot Modal fails is one line
 * naming the sandbox and Modal's words.
 */
export async function captureVersion(
  records: ModalRecords,
  sandbox: Sandbox,
  rec: ModalEnvironmentRecord,
  o: { number: number; command: string },
): Promise<ModalVersionRecord> {
  const id = `${rec.project}@v${o.number}`;
  if (await records.getVersion(id)) throw new DenvError("conflict", `version ${id} exists`);
  if (sandbox.sandboxId !== rec.sandboxId)
    throw new DenvError("invalid_request", `sandbox ${sandbox.sandboxId} is not environment ${rec.id}'s`);
  const started = Date.now();
  let imageId: string;
  try {
    imageId = (await sandbox.snapshotFilesystem({ timeoutMs: SNAPSHOT_TIMEOUT_MS, ttlMs: null })).imageId;
  } catch (e) {
    const words = (e instanceof Error ? e.message : String(e)).split("\n")[0];
    throw new DenvError("docker", `Modal: snapshot of sandbox ${rec.sandboxId} (${rec.id}) failed: ${words}`);
  }
  const took = Date.now() - started;
  const v: ModalVersionRecord = {
    id,
    project: rec.project,
    number: o.number,
    imageId,
    ...(rec.imageUser !== undefined ? { imageUser: rec.imageUser } : {}),
    sourceEnvironment: rec.id,
    ...(rec.parentVersion ? { parentVersion: rec.parentVersion } : {}),
    plan: rec.plan,
    agent: rec.agent,
    command: o.command,
    ...(rec.testsTar ? { testsTar: rec.testsTar } : {}),
    timings: { snapshot_ms: took, total_ms: Date.now() - started },
    createdAt: new Date(started).toISOString(),
  };
  await records.putVersion(v);
  return v;
}
