import { DenvError } from "@denv/spec";
import { Labels } from "@denv/spec/labels";
import type { HostRuntime, Settled } from "../../runtime/host-runtime.js";
import {
  type CleanupProvider,
  collectGarbage,
  type ProviderSnapshot,
  settleCommand,
} from "../sandbox-cleanup.js";
import { PrimeApiError, type PrimeSandbox } from "./prime-api.js";
import { type PrimeHost, provider } from "./prime-host.js";
import { primeLabels } from "./prime-materialize.js";
import {
  checkpointsOf,
  type PrimeEnvironmentRecord,
  type PrimeVersionRecord,
  sandboxesOf,
} from "./prime-records.js";
import { hostEnvironment, hostVersion } from "./prime-reports.js";

/** Statuses Prime keeps a sandbox's record in after it is gone. */
const GONE = new Set(["TERMINATED", "ERROR", "TIMEOUT"]);

/** The sandboxes denv made whose labels hold `labels`, every page of them, gone ones too. */
async function sandboxesWith(host: PrimeHost, labels: Record<string, string>): Promise<PrimeSandbox[]> {
  const want = primeLabels({ [Labels.managed]: "true", ...labels });
  const out: PrimeSandbox[] = [];
  for (let page = 1; ; page++) {
    const list = await provider(() => host.api.listSandboxes({ labels: want, page, perPage: 100 }));
    out.push(...list.sandboxes);
    if (!list.hasNext) return out;
  }
}

/** Prime's `key=value` labels as denv's map. */
function labelMap(labels: readonly string[]): Record<string, string> {
  return Object.fromEntries(labels.map((l) => [l.slice(0, l.indexOf("=")), l.slice(l.indexOf("=") + 1)]));
}

/** Deletes a sandbox; one Prime no longer has is what was asked. */
export async function deleteSandbox(host: PrimeHost, id: string): Promise<void> {
  await provider(() => host.api.deleteSandbox(id)).catch((e: unknown) => {
    if (!(e instanceof DenvError && e.code === "not_found")) throw e;
  });
}

/** Deletes a private network; one Prime no longer has is what was asked. */
export async function deleteNetwork(host: PrimeHost, id: string): Promise<void> {
  await provider(() => host.api.deleteNetwork(id)).catch((e: unknown) => {
    if (!(e instanceof DenvError && e.code === "not_found")) throw e;
  });
}

/**
 * Deletes a version's checkpoint; one Prime no longer has is what was asked. Prime refuses (409)
 * to delete the newest checkpoint of a running sandbox, the one it restores the sandbox's chain
 * from: that one is kept ("kept"), and gc deletes it once a later checkpoint replaces it or its
 * sandbox is gone, as no version records it then.
 */
export async function deleteCheckpoint(host: PrimeHost, id: string): Promise<"deleted" | "kept"> {
  try {
    await host.api.deleteCheckpoint(id);
    return "deleted";
  } catch (e) {
    if (e instanceof PrimeApiError && e.status === 404) return "deleted";
    if (e instanceof PrimeApiError && e.status === 409) {
      host.log(`checkpoint ${id} kept while it is its running sandbox's newest: gc deletes it later`);
      return "kept";
    }
    return provider(() => Promise.reject(e));
  }
}

/**
 * The checkpoints of this host's sandboxes (Prime lists them per sandbox, and keeps them after
 * the sandbox goes), but those still being made and the newest of a running sandbox, which Prime
 * keeps while it runs (a snapshot under way makes it so, and its command records it).
 */
async function checkpoints(host: PrimeHost): Promise<ProviderSnapshot[]> {
  const out: ProviderSnapshot[] = [];
  for (const sbx of await sandboxesWith(host, { [Labels.host]: host.hostId })) {
    const all = await provider(() => host.api.listCheckpoints(sbx.id));
    const tip = GONE.has(sbx.status) ? undefined : all.at(-1)?.id;
    for (const c of all) {
      if (c.state === "PENDING" || c.state === "DELETING" || c.id === tip) continue;
      out.push({ key: c.id, name: c.id, remove: () => provider(() => host.api.deleteCheckpoint(c.id)) });
    }
  }
  return out;
}

/** Prime as the shared cleanup sees it (sandbox-cleanup.ts). */
function cleanup(host: PrimeHost): CleanupProvider<PrimeEnvironmentRecord, PrimeVersionRecord> {
  return {
    name: "prime",
    sandboxes: async (labels) =>
      (await sandboxesWith(host, labels))
        .filter((s) => !GONE.has(s.status))
        .map((s) => ({ id: s.id, labels: labelMap(s.labels), remove: () => deleteSandbox(host, s.id) })),
    exists: (id) =>
      host.api.getSandbox(id).then(
        (s) => !GONE.has(s.status),
        () => false,
      ),
    versionSnapshots: () => checkpoints(host),
    sandboxOf: sandboxesOf,
    snapshotOf: checkpointsOf,
    environmentReport: hostEnvironment,
    versionReport: hostVersion,
  };
}

/**
 * Deletes the sandboxes that carry this host's id and no record owns (nor a command still making
 * them, a verify's own included), the checkpoints of this host's sandboxes that no version
 * records, and the tests archives that no record names.
 */
export function gc(host: PrimeHost): Promise<{ removed: string[] }> {
  return collectGarbage(host, cleanup(host));
}

/**
 * Everything this host holds at Prime removed, for `denvd release` when its target goes: every
 * environment's sandbox and every version's checkpoint (through the runtime's own verbs, records
 * with them), then what gc finds. Built images stay: Prime's API has no route that deletes one.
 */
export async function releaseAll(
  host: PrimeHost,
  runtime: { destroy(envId: string): Promise<void>; deleteVersion(versionId: string): Promise<void> },
): Promise<{ removed: string[] }> {
  const removed = await host.records.releaseRecorded(runtime, {
    environment: (rec) => `sandbox ${sandboxesOf(rec).join(", ")}`,
    version: (v) => `checkpoint ${checkpointsOf(v).join(", ")}`,
  });
  removed.push(...(await gc(host)).removed);
  return { removed };
}

/** What a crash left of a command (sandbox-cleanup.ts): a sandbox it made and did not record is deleted. */
export function settle(host: PrimeHost, command: Parameters<HostRuntime["settle"]>[0]): Promise<Settled> {
  return settleCommand(host, cleanup(host), command);
}
