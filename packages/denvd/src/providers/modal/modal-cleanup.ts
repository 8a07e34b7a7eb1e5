import { DenvError } from "@denv/spec";
import { Labels } from "@denv/spec/labels";
import type { HostRuntime, Settled } from "../../runtime/host-runtime.js";
import {
  type CleanupProvider,
  collectGarbage,
  type ProviderSandbox,
  settleCommand,
} from "../sandbox-cleanup.js";
import { type ModalBridge, modal } from "./modal-host.js";
import type { ModalEnvironmentRecord, ModalVersionRecord } from "./modal-records.js";
import { hostEnvironment, hostVersion } from "./modal-reports.js";

/** The running sandboxes of the host's app whose tags hold denv's managed tag and `labels`. */
async function sandboxesWith(host: ModalBridge, labels: Record<string, string>): Promise<ProviderSandbox[]> {
  const out: ProviderSandbox[] = [];
  await modal(async () => {
    const tags = { [Labels.managed]: "true", ...labels };
    for await (const sb of host.client.sandboxes.list({ appId: host.app.appId, tags })) {
      out.push({ id: sb.sandboxId, labels: await sb.getTags(), remove: () => terminate(host, sb.sandboxId) });
    }
  });
  return out;
}

/** Terminates a sandbox; one Modal no longer has (or that has ended) is what was asked. */
export async function terminate(host: ModalBridge, sandboxId: string): Promise<void> {
  await modal(async () => (await host.sandbox(sandboxId)).terminate()).catch((e: unknown) => {
    if (!(e instanceof DenvError && e.code === "not_found")) throw e;
  });
  host.forget(sandboxId);
}

/** Deletes an image at Modal (a version's snapshot); one Modal no longer has is what was asked. */
export async function deleteImage(host: ModalBridge, imageId: string): Promise<void> {
  await modal(() => host.client.images.delete(imageId)).catch((e: unknown) => {
    if (!(e instanceof DenvError && e.code === "not_found")) throw e;
  });
}

/** Whether the sandbox still runs: `poll` answers null until it ends; an unknown one is gone. */
async function running(host: ModalBridge, sandboxId: string): Promise<boolean> {
  try {
    return (await (await host.sandbox(sandboxId)).poll()) === null;
  } catch {
    return false;
  }
}

/**
 * Modal as the shared cleanup sees it (sandbox-cleanup.ts). Its API lists sandboxes by tag but no
 * images: a version's snapshot is deleted with its version (deleteVersion), and none is found
 * otherwise: a snapshot a crash cut off before its version was recorded stays in the account.
 */
function cleanup(host: ModalBridge): CleanupProvider<ModalEnvironmentRecord, ModalVersionRecord> {
  return {
    name: "modal",
    sandboxes: (labels) => sandboxesWith(host, labels),
    exists: (id) => running(host, id),
    versionSnapshots: async () => [],
    sandboxOf: (rec) => rec.sandboxId,
    snapshotOf: (v) => v.imageId,
    environmentReport: hostEnvironment,
    versionReport: hostVersion,
  };
}

/** Terminates the sandboxes tagged with this host's id that no record owns, and sweeps the tests archives. */
export function gc(host: ModalBridge): Promise<{ removed: string[] }> {
  return collectGarbage(host, cleanup(host));
}

/**
 * Everything this host holds at Modal removed, for `denvd release` when its target goes: every
 * environment's sandbox and every version's snapshot image (through the runtime's own verbs,
 * records with them), then what gc finds. Images built for deploys stay: Modal keys them by their
 * definition and answers the next build of the same file with them.
 */
export async function releaseAll(
  host: ModalBridge,
  runtime: { destroy(envId: string): Promise<void>; deleteVersion(versionId: string): Promise<void> },
): Promise<{ removed: string[] }> {
  const removed = await host.records.releaseRecorded(runtime, {
    environment: (rec) => `sandbox ${rec.sandboxId}`,
    version: (v) => `image ${v.imageId}`,
  });
  removed.push(...(await gc(host)).removed);
  return { removed };
}

/** What a crash left of a command (sandbox-cleanup.ts): a sandbox it made and did not record is terminated. */
export function settle(host: ModalBridge, command: Parameters<HostRuntime["settle"]>[0]): Promise<Settled> {
  return settleCommand(host, cleanup(host), command);
}
