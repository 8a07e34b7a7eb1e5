import { DenvError } from "@denv/spec";
import type { HostContext } from "./host-context.js";

/**
 * A /24 of the host's pool that no network on the engine uses. Callers hold the "#subnet" lock
 * and retry when the engine reports an overlap (another runtime on the same engine).
 */
export async function freeSubnet(ctx: HostContext): Promise<{ subnet: string; gateway: string }> {
  const [a, b] = ctx.settings.subnetPool.split(".");
  const used = new Set(await ctx.docker.networks.usedSubnets());
  for (let c = 0; c < 256; c++) {
    const subnet = `${a}.${b}.${c}.0/24`;
    if (!used.has(subnet)) return { subnet, gateway: `${a}.${b}.${c}.1` };
  }
  throw new DenvError("conflict", `no free /24 left in the subnet pool ${ctx.settings.subnetPool}`);
}
