import { statfs } from "node:fs/promises";
import { availableParallelism, totalmem } from "node:os";
import { type HelloFrame, PROTOCOL_VERSION } from "@denv/spec/protocol/frames";
import type { HostRuntime } from "../runtime/host-runtime.js";
import type { Journal } from "./journal.js";
import { DENVD_VERSION } from "./version.js";

/** Free bytes on the filesystem of the state dir (where volumes and snapshots grow). */
async function diskFree(path: string): Promise<number> {
  const s = await statfs(path);
  return s.bavail * s.bsize;
}

/** The memory this host offers: the machine's, or less when the operator caps it (--capacity-memory). */
export function offeredMemory(machine: number, cap: number | undefined): number {
  return cap === undefined ? machine : Math.min(machine, cap);
}

/**
 * The first frame on every connection: who this host is, what it can take, and what it holds
 * (environments, versions, commands not done) so that the control plane can reconcile its view.
 */
export async function buildHello(o: {
  runtime: HostRuntime;
  journal: Journal;
  labels: Record<string, string>;
  capacityMemory?: number | undefined;
  /** The transfer listener's address, as it listens (--transfer-listen). */
  transfer?: { address: string } | undefined;
}): Promise<HelloFrame> {
  const held = await o.runtime.list();
  return {
    v: PROTOCOL_VERSION,
    type: "hello",
    host_id: o.runtime.hostId,
    version: DENVD_VERSION,
    capacity: {
      cpus: availableParallelism(),
      memory_bytes: offeredMemory(totalmem(), o.capacityMemory),
      disk_free_bytes: await diskFree(o.runtime.stateDir),
    },
    labels: o.labels,
    environments: held.environments.map((e) => ({
      id: e.id,
      status: e.status,
      ...(e.parent_version ? { parent_version: e.parent_version } : {}),
    })),
    versions: held.versions.map((v) => v.id),
    unfinished: await o.journal.unfinished(),
    capabilities: { binary_data: true },
    ...(o.transfer ? { transfer_listen: o.transfer.address } : {}),
  };
}
