import { Labels } from "@denv/spec";
import type { HostRuntime, Settled } from "../../runtime/host-runtime.js";
import { templatePrefix } from "../e2b/build-template.js";
import { type CleanupProvider, collectGarbage, settleCommand } from "../sandbox-cleanup.js";
import { type DaytonaHost, provider } from "./daytona-host.js";
import type { DaytonaEnvironmentRecord, DaytonaVersionRecord } from "./daytona-records.js";
import { hostEnvironment, hostVersion } from "./daytona-reports.js";
import type { DaytonaSandbox } from "./daytona-sdk.js";

/** The sandboxes denv made whose labels hold `labels`, every page of them. */
async function sandboxesWith(host: DaytonaHost, labels: Record<string, string>): Promise<DaytonaSandbox[]> {
  const out: DaytonaSandbox[] = [];
  for await (const sbx of host.client.list({ labels: { [Labels.managed]: "true", ...labels } }))
    out.push(sbx);
  return out;
}

/** Daytona as the shared cleanup sees it (sandbox-cleanup.ts). */
function cleanup(host: DaytonaHost): CleanupProvider<DaytonaEnvironmentRecord, DaytonaVersionRecord> {
  return {
    name: "daytona",
    sandboxes: async (labels) =>
      (await sandboxesWith(host, labels)).map((sbx) => ({
        id: sbx.id,
        labels: sbx.labels,
        remove: () => provider(() => sbx.delete()),
      })),
    exists: (id) =>
      host.client.get(id).then(
        () => true,
        () => false,
      ),
    versionSnapshots: async () => {
      const prefix = templatePrefix(host.hostId);
      return (await host.client.snapshot.list({ limit: 200 })).items
        .filter((s) => s.name.startsWith(prefix) && /-v\d+-[0-9a-f]{8}$/.test(s.name))
        .map((s) => ({ key: s.name, name: s.name, remove: () => host.client.snapshot.delete(s) }));
    },
    sandboxOf: (rec) => rec.sandboxId,
    snapshotOf: (v) => v.snapshot,
    environmentReport: hostEnvironment,
    versionReport: hostVersion,
  };
}

/**
 * Deletes the sandboxes that carry this host's id and no record owns (nor a command still making
 * them, a verify's own included), the snapshots named as this host's versions that no version
 * records, and the tests archives that no record names.
 */
export function gc(host: DaytonaHost): Promise<{ removed: string[] }> {
  return collectGarbage(host, cleanup(host));
}

/**
 * Everything this host holds at Daytona removed, for `denvd release` when its target goes: every
 * environment's sandbox and every version's snapshot (through the runtime's own verbs, records
 * with them), what gc finds, and the snapshots it built for services.
 */
export async function releaseAll(
  host: DaytonaHost,
  runtime: { destroy(envId: string): Promise<void>; deleteVersion(versionId: string): Promise<void> },
): Promise<{ removed: string[] }> {
  const removed = await host.records.releaseRecorded(runtime, {
    environment: (rec) => `sandbox ${rec.sandboxId}`,
    version: (v) => `snapshot ${v.snapshot}`,
  });
  removed.push(...(await gc(host)).removed);
  const prefix = templatePrefix(host.hostId);
  for (const s of (await host.client.snapshot.list({ limit: 200 })).items) {
    if (!s.name.startsWith(prefix)) continue;
    await provider(() => host.client.snapshot.delete(s));
    removed.push(`snapshot ${s.name}`);
  }
  return { removed };
}

/** What a crash left of a command (sandbox-cleanup.ts): a sandbox it made and did not record is deleted. */
export function settle(host: DaytonaHost, command: Parameters<HostRuntime["settle"]>[0]): Promise<Settled> {
  return settleCommand(host, cleanup(host), command);
}
