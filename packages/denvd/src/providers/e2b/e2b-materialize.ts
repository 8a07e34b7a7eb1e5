import { DenvError, type EgressProbe, labelsFor, type Plan, Protection, ProviderMessages } from "@denv/spec";
import type { PhaseListener } from "../../runtime/phase-listener.js";
import { PROVIDER } from "./check-plan.js";
import { type E2bHost, provider } from "./e2b-host.js";
import type { E2bEnvironmentRecord, E2bVersionRecord } from "./e2b-records.js";
import { METHOD } from "./e2b-reports.js";
import { type E2bSandbox, loadE2b } from "./e2b-sdk.js";
import { probeSandboxEgress } from "./egress-probe.js";
import { processBaseline, resumeProcesses } from "./sandbox-processes.js";
import {
  lookupUser,
  readPasswd,
  refuseRootAgent,
  refuseWritableSystem,
  runAs,
  type SandboxUser,
} from "./sandbox-user.js";

/** What an environment is before it has a sandbox. */
export interface EnvironmentBase {
  id: string;
  project: string;
  name: string;
  plan: Plan;
  command: string;
  /** The template's alias (a deploy) or the version id (a fork). */
  image: string;
  testsTar: string | undefined;
  verifierTemplate: string | undefined;
}

/**
 * A sandbox for an environment, from a template (a deploy) or a version's snapshot (a fork):
 * created with the environment's labels as metadata and no internet access (unless the file is
 * a service project's that allows egress), the agent's user resolved in it and never root
 * (protection 1), the egress probe run (protection 5), its processes taken as the baseline the
 * verify's stop of the agent keeps, then recorded. A failure kills what it created.
 */
export async function createEnvironment(
  host: E2bHost,
  base: EnvironmentBase,
  from: string,
  version: E2bVersionRecord | undefined,
  phase: PhaseListener,
): Promise<{ rec: E2bEnvironmentRecord; sbx: E2bSandbox }> {
  const { Sandbox } = await loadE2b();
  const { plan, command } = base;
  const service = plan.agent.service;
  const allowInternetAccess = plan.egress === "allow";
  const started = Date.now();
  phase.start("place");
  phase.end("place", { host: host.hostId }, version ? "restore" : "start");
  host.inFlight.add(command);
  let sbx: E2bSandbox | undefined;
  try {
    sbx = await provider(() =>
      Sandbox.create(from, {
        ...host.api,
        metadata: labelsFor({
          host: host.hostId,
          project: base.project,
          environment: base.id,
          role: "service",
          command,
          service,
        }),
        envs: plan.services[0]?.environment ?? {},
        allowInternetAccess,
        timeoutMs: host.timeoutMs,
      }),
    );
    const made = sbx;
    const created = Date.now();
    const info = await made.getInfo();
    if (version) phase.end("restore", { version: version.id, method: METHOD }, "start");
    phase.end("start", { containers: { [service]: made.sandboxId } });
    const passwd = await readPasswd(made);
    const agent = lookupUser(passwd, plan.agent.user);
    if (plan.kind === "rl-environment") {
      await refuseRootAgent(made, agent, service);
      await refuseWritableSystem(runAs(made, agent), agent, service);
    }
    // A verifier that reaches the services grades in this sandbox: its uid is not the agent's to
    // act as. One whose user the sandbox lacks cannot run here (its verify says so).
    const sharing =
      plan.kind === "rl-environment" && plan.verifier?.services !== false ? plan.verifier : undefined;
    const verifierUid = sharing ? uidOf(passwd, sharing.user) : undefined;
    let probe: EgressProbe | { skipped: string };
    const probeStart = Date.now();
    if (allowInternetAccess) probe = { skipped: "egress is allowed (a service project)" };
    else {
      phase.start("probe");
      probe = await probeEgress(host, made, agent, service);
      if (!probe.ok) {
        throw new DenvError("egress_leak", Protection.egressLeak(base.id, probe.findings[0] ?? "unknown"));
      }
      phase.end("probe", probe);
    }
    // A fork resumes the agent's processes of its snapshot (held still there): they run on, and
    // are the agent's here too.
    const agents = version?.agentProcesses ?? [];
    await provider(() => resumeProcesses(made, agents));
    const baseline = await provider(() => processBaseline(made, agents));
    const done = Date.now();
    const { testsTar, verifierTemplate, ...named } = base;
    const rec: E2bEnvironmentRecord = {
      ...named,
      ...(testsTar ? { testsTar } : {}),
      ...(verifierTemplate ? { verifierTemplate } : {}),
      sandboxId: made.sandboxId,
      templateId: info.templateId,
      agent: plan.agent,
      agentName: agent.name,
      agentUid: agent.uid,
      ...(verifierUid !== undefined ? { verifierUid } : {}),
      allowInternetAccess,
      ...(version ? { parentVersion: version.id } : {}),
      timings: { create_ms: created - started, probe_ms: done - probeStart, total_ms: done - started },
      probe,
      baseline,
      createdAt: new Date(started).toISOString(),
    };
    await host.records.putEnvironment(rec);
    return { rec, sbx: made };
  } catch (err) {
    if (sbx) {
      const id = sbx.sandboxId;
      await sbx.kill().catch((e: unknown) => host.log(`${base.id}: could not kill ${id}: ${String(e)}`));
    }
    throw err;
  } finally {
    host.inFlight.delete(command);
  }
}

/** The egress probe from inside the sandbox, against the host's canaries (protection 5). */
export function probeEgress(
  host: E2bHost,
  sbx: E2bSandbox,
  agent: SandboxUser,
  service: string,
): Promise<EgressProbe> {
  if (host.canaries.length === 0) throw new DenvError("conflict", ProviderMessages.noCanary(PROVIDER));
  return provider(() => probeSandboxEgress(sbx, agent, service, host.canaries));
}

/**
 * A sandbox of the verifier's own template for an environment (a verify's fork), labelled as the
 * environment's verifier and created without internet access; gc leaves it alone until
 * `release` kills it.
 */
export async function createVerifierSandbox(
  host: E2bHost,
  rec: E2bEnvironmentRecord,
  command: string,
): Promise<{ sbx: E2bSandbox; template: string; release(): Promise<void> }> {
  const template = rec.verifierTemplate;
  if (!template) throw new DenvError("conflict", `environment ${rec.id} has no verifier template`);
  const { Sandbox } = await loadE2b();
  const own = `${command}-verifier`;
  host.inFlight.add(own);
  try {
    const sbx = await provider(() =>
      Sandbox.create(template, {
        ...host.api,
        metadata: labelsFor({
          host: host.hostId,
          project: rec.project,
          environment: rec.id,
          role: "verifier",
          command: own,
        }),
        allowInternetAccess: false,
        timeoutMs: host.timeoutMs,
      }),
    );
    const release = async () => {
      await provider(() => sbx.kill()).finally(() => host.inFlight.delete(own));
    };
    return { sbx, template, release };
  } catch (err) {
    host.inFlight.delete(own);
    throw err;
  }
}

/** The uid `user` has in the passwd, or undefined when it has none there. */
function uidOf(passwd: string, user: string): number | undefined {
  try {
    return lookupUser(passwd, user).uid;
  } catch {
    return undefined;
  }
}
