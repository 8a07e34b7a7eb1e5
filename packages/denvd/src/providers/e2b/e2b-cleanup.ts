import { Labels } from "@denv/spec/labels";
import type { HostRuntime, Settled } from "../../runtime/host-runtime.js";
import { type CleanupProvider, collectGarbage, settleCommand } from "../sandbox-cleanup.js";
import { templatePrefix } from "./build-template.js";
import { type E2bHost, provider } from "./e2b-host.js";
import type { E2bEnvironmentRecord, E2bVersionRecord } from "./e2b-records.js";
import { hostEnvironment, hostVersion } from "./e2b-reports.js";
import { loadE2b } from "./e2b-sdk.js";

/** E2B as the shared cleanup sees it (sandbox-cleanup.ts). */
function cleanup(host: E2bHost): CleanupProvider<E2bEnvironmentRecord, E2bVersionRecord> {
  return {
    name: "e2b",
    sandboxes: async (labels) => {
      const { Sandbox } = await loadE2b();
      return (await sandboxesWith(host, labels)).map((info) => ({
        id: info.sandboxId,
        labels: info.metadata,
        remove: async () => {
          await Sandbox.kill(info.sandboxId, host.api);
        },
      }));
    },
    exists: async (id) => {
      const { Sandbox } = await loadE2b();
      return Sandbox.getInfo(id, host.api).then(
        () => true,
        () => false,
      );
    },
    versionSnapshots: async () => {
      const { Sandbox } = await loadE2b();
      const prefix = templatePrefix(host.hostId);
      const pages = Sandbox.listSnapshots(host.api);
      const all = [];
      while (pages.hasNext) all.push(...(await pages.nextItems()));
      return all
        .filter((s) => s.names.some((n) => (n.split("/").pop() ?? "").startsWith(prefix) && /-v\d+-/.test(n)))
        .map((s) => ({
          key: s.snapshotId,
          name: s.snapshotId,
          remove: async () => {
            await Sandbox.deleteSnapshot(s.snapshotId, host.api);
          },
        }));
    },
    sandboxOf: (rec) => rec.sandboxId,
    snapshotOf: (v) => v.snapshotId,
    environmentReport: hostEnvironment,
    versionReport: hostVersion,
  };
}

/**
 * Kills the sandboxes that carry this host's id and no record owns (nor a command still making
 * them), deletes the snapshots named as this host's that no version records, and the tests
 * archives that no record names.
 */
export function gc(host: E2bHost): Promise<{ removed: string[] }> {
  return collectGarbage(host, cleanup(host));
}

/**
 * Everything this host holds at E2B removed, for `denvd release` when its target goes: every
 * environment's sandbox and every version's snapshot (through the runtime's own verbs, records
 * with them), what gc finds, and the templates it built.
 */
export async function releaseAll(
  host: E2bHost,
  runtime: { destroy(envId: string): Promise<void>; deleteVersion(versionId: string): Promise<void> },
): Promise<{ removed: string[] }> {
  const removed = await host.records.releaseRecorded(runtime, {
    environment: (rec) => `sandbox ${rec.sandboxId}`,
    version: (v) => `snapshot ${v.snapshotId}`,
  });
  removed.push(...(await gc(host)).removed);
  for (const alias of await host.records.templates()) {
    await provider(() => deleteTemplate(host, alias));
    await host.records.deleteTemplate(alias);
    removed.push(`template ${alias}`);
  }
  return { removed };
}

/** What a crash left of a command (sandbox-cleanup.ts): a sandbox it made and did not record is killed. */
export function settle(host: E2bHost, command: Parameters<HostRuntime["settle"]>[0]): Promise<Settled> {
  return settleCommand(host, cleanup(host), command);
}

/** The sandboxes denv made whose metadata holds `metadata`, every page of them. */
async function sandboxesWith(host: E2bHost, metadata: Record<string, string>) {
  const { Sandbox } = await loadE2b();
  const pages = Sandbox.list({
    ...host.api,
    // Paused ones too (a stopped environment's): they are kept at E2B, and cost storage.
    query: { metadata: { [Labels.managed]: "true", ...metadata }, state: ["running", "paused"] },
  });
  const out = [];
  while (pages.hasNext) out.push(...(await pages.nextItems()));
  return out;
}

/** Deletes a template at E2B (DELETE /templates/{templateID}, which takes its alias too). */
export async function deleteTemplate(host: E2bHost, alias: string): Promise<void> {
  const { ApiClient, ConnectionConfig } = await loadE2b();
  const res = await new ApiClient(new ConnectionConfig(host.api)).api.DELETE("/templates/{templateID}", {
    params: { path: { templateID: alias } },
  });
  // Already gone is what was asked.
  if (res.error && res.response.status !== 404) {
    throw new Error(`template ${alias}: ${res.response.status} ${JSON.stringify(res.error)}`);
  }
}
