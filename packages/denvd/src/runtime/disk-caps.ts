import { DefaultDiskBytes, DenvError, HostRefusals, type Plan } from "@denv/spec";
import type { HostContext } from "./host-context.js";

/** The disk caps an environment gets on this host, and why. */
export interface DiskDecision {
  /** Cap of each live volume; undefined where the store cannot cap. */
  volumeBytes: number | undefined;
  /** Cap of each writable layer; undefined where the engine cannot cap. */
  layerBytes: number | undefined;
  evidence: {
    volumes: { cap_bytes: number; enforced: boolean; by: string };
    layers: { cap_bytes: number; enforced: boolean; by: string };
  };
}

/**
 * Caps from x-denv.disk (or the default) where this host can enforce them. A cap the file asked
 * for and the host cannot enforce is refused before anything is created; a default one that
 * cannot be enforced is recorded as such in the evidence.
 */
export async function decideDiskCaps(ctx: HostContext, plan: Plan): Promise<DiskDecision> {
  const disk = plan.disk ?? { volumeBytes: DefaultDiskBytes, layerBytes: DefaultDiskBytes, explicit: [] };
  const layers = await ctx.docker.layerCaps();
  const volumesBy = ctx.store.canCap
    ? "btrfs quota groups"
    : "not enforced: the volume store copies directories (no btrfs)";
  const layersBy = layers.supported
    ? `storage-opt size on ${layers.storage}`
    : `not enforced: ${layers.storage} has no per-container size limit`;
  if (disk.explicit.includes("volumes") && !ctx.store.canCap && plan.volumes.length > 0) {
    throw new DenvError(
      "forbidden",
      HostRefusals.diskUnenforceable("volumes", "the volume store copies directories (no btrfs)"),
    );
  }
  if (disk.explicit.includes("layers") && !layers.supported) {
    throw new DenvError(
      "forbidden",
      HostRefusals.diskUnenforceable("writable layers", `${layers.storage} has no per-container size limit`),
    );
  }
  return {
    volumeBytes: ctx.store.canCap ? disk.volumeBytes : undefined,
    layerBytes: layers.supported ? disk.layerBytes : undefined,
    evidence: {
      volumes: { cap_bytes: disk.volumeBytes, enforced: ctx.store.canCap, by: volumesBy },
      layers: { cap_bytes: disk.layerBytes, enforced: layers.supported, by: layersBy },
    },
  };
}
