import { randomBytes } from "node:crypto";
import { DenvError, type EgressProbe, Protection } from "@denv/spec";
import type { PhaseListener } from "../../runtime/phase-listener.js";
import { slug, templatePrefix } from "./build-template.js";
import { connectSandbox, type E2bHost, provider } from "./e2b-host.js";
import { probeEgress } from "./e2b-materialize.js";
import type { E2bEnvironmentRecord, E2bVersionRecord } from "./e2b-records.js";
import type { E2bSandbox } from "./e2b-sdk.js";
import { whileAgentHeld } from "./sandbox-processes.js";

/**
 * A version of an environment: an E2B snapshot of its sandbox (memory and disk), taken with the
 * agent held still so that the version records what of it a fork resumes, recorded as
 * PROJECT@vN. The caller holds the environment's lock.
 */
export async function captureVersion(
  host: E2bHost,
  rec: E2bEnvironmentRecord,
  sbx: E2bSandbox,
  o: { number: number; command: string; phase: PhaseListener },
): Promise<E2bVersionRecord> {
  const id = `${rec.project}@v${o.number}`;
  if (await host.records.getVersion(id)) throw new DenvError("conflict", `version ${id} exists`);
  const started = Date.now();
  o.phase.start("capture layers");
  // Named so that gc finds a snapshot a crash left unrecorded (names are unique: E2B adds a
  // build to an existing name).
  const name = `${templatePrefix(host.hostId)}${slug(rec.project, 24)}-v${o.number}-${randomBytes(4).toString("hex")}`;
  const { result: snap, held } = await provider(() =>
    whileAgentHeld(sbx, rec.baseline, () => sbx.createSnapshot({ name })),
  );
  const took = Date.now() - started;
  o.phase.end("capture layers", { committed: [rec.plan.agent.service] });
  const v: E2bVersionRecord = {
    id,
    project: rec.project,
    number: o.number,
    snapshotId: snap.snapshotId,
    sourceEnvironment: rec.id,
    ...(rec.parentVersion ? { parentVersion: rec.parentVersion } : {}),
    plan: rec.plan,
    agent: rec.agent,
    agentName: rec.agentName,
    agentUid: rec.agentUid,
    allowInternetAccess: rec.allowInternetAccess,
    command: o.command,
    ...(rec.testsTar ? { testsTar: rec.testsTar } : {}),
    ...(rec.verifierTemplate ? { verifierTemplate: rec.verifierTemplate } : {}),
    ...(held.length > 0 ? { agentProcesses: held } : {}),
    timings: { snapshot_ms: took, total_ms: Date.now() - started },
    createdAt: new Date(started).toISOString(),
  };
  await host.records.putVersion(v);
  return v;
}

/**
 * Stop and start of an environment on E2B: E2B's pause of its sandbox (memory and disk kept, no
 * timeout running, so the keep-alive leaves it alone) and the resume a connect makes. Its
 * processes go on where they were, the agent's too: the baseline taken when the sandbox was made
 * still tells them apart, so a verify after a start stops them as before. Before the environment
 * counts as running again, the egress probe runs from inside it, as after every start.
 * The caller holds the environment's lock.
 */

export async function pauseEnvironment(
  host: E2bHost,
  rec: E2bEnvironmentRecord,
  sbx: E2bSandbox,
  phase: PhaseListener,
): Promise<E2bEnvironmentRecord> {
  phase.start("stop");
  // false: it was paused already (by a stop whose answer was lost); the record says so now.
  await provider(() => sbx.pause());
  const next: E2bEnvironmentRecord = { ...rec, paused: true };
  await host.records.putEnvironment(next);
  phase.end("stop", { stopped: [rec.plan.agent.service] });
  return next;
}

/**
 * Resumes the sandbox and probes it. A probe that finds a way out pauses it again and throws
 * `egress_leak`: the environment stays stopped.
 */
export async function resumeEnvironment(
  host: E2bHost,
  rec: E2bEnvironmentRecord,
  phase: PhaseListener,
): Promise<{ rec: E2bEnvironmentRecord; sbx: E2bSandbox }> {
  const service = rec.plan.agent.service;
  phase.start("start");
  const sbx = await connectSandbox(host, rec.sandboxId);
  phase.end("start", { containers: { [service]: rec.sandboxId } }, "health");
  // A resume restores the processes as they were: the ready check passed when the sandbox was made.
  phase.end("health", { services: [service] });
  let probe: EgressProbe | { skipped: string } = { skipped: "egress is allowed (a service project)" };
  if (!rec.allowInternetAccess) {
    phase.start("probe");
    probe = await probeEgress(host, sbx, { name: rec.agentName, uid: rec.agentUid }, service);
    if (!probe.ok) {
      await provider(() => sbx.pause());
      throw new DenvError("egress_leak", Protection.egressLeak(rec.id, probe.findings[0] ?? "unknown"));
    }
    phase.end("probe", probe);
  }
  const next: E2bEnvironmentRecord = { ...rec, paused: false, probe };
  await host.records.putEnvironment(next);
  return { rec: next, sbx };
}
