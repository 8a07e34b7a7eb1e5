import { randomInt } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";
import { DenvError } from "@denv/spec";
import type { HostContext } from "./host-context.js";

/** What placing a network on a free /24 needs of the engine. */
export interface SubnetEngine {
  usedSubnets(): Promise<string[]>;
}

/** Attempts at creating a network before an overlap the engine keeps reporting is an error. */
export const SUBNET_ATTEMPTS = 10;

/**
 * A /24 of the /16 `pool` that no network on the engine uses and that is not in `skip`. The
 * search starts at a random /24, so that two runtimes on one engine rarely race for the same
 * one (the first free one was every runtime's choice before).
 */
export async function freeSubnet(
  engine: SubnetEngine,
  pool: string,
  skip: ReadonlySet<string> = new Set(),
): Promise<{ subnet: string; gateway: string }> {
  const [a, b] = pool.split(".");
  const used = new Set(await engine.usedSubnets());
  const start = randomInt(256);
  for (let i = 0; i < 256; i++) {
    const c = (start + i) % 256;
    const subnet = `${a}.${b}.${c}.0/24`;
    if (!used.has(subnet) && !skip.has(subnet)) return { subnet, gateway: `${a}.${b}.${c}.1` };
  }
  throw new DenvError("conflict", `no free /24 left in the subnet pool ${pool}`);
}

/**
 * Creates a network on a free /24. Another runtime on the same engine (another denvd, compose,
 * Harbor's docker backend) may take it between the look and the create, and the engine may still
 * hold the pool of a network it has just removed while its list no longer shows it: it refuses
 * the overlap, and the next attempt looks again, skipping the /24s it refused, after a short
 * wait. Callers hold the "#subnet" lock (runtimes of this process do not race each other).
 */
export async function onFreeSubnet<T>(
  engine: SubnetEngine,
  pool: string,
  create: (net: { subnet: string; gateway: string }) => Promise<T>,
): Promise<T> {
  const refused = new Set<string>();
  for (let attempt = 1; ; attempt++) {
    const net = await freeSubnet(engine, pool, refused);
    try {
      return await create(net);
    } catch (err) {
      if (attempt >= SUBNET_ATTEMPTS || !/overlap/i.test((err as Error).message)) throw err;
      refused.add(net.subnet);
      await sleep(20 * attempt);
    }
  }
}

/** onFreeSubnet on this host's engine and pool. */
export function createOnFreeSubnet<T>(
  ctx: HostContext,
  create: (net: { subnet: string; gateway: string }) => Promise<T>,
): Promise<T> {
  return onFreeSubnet(ctx.docker.networks, ctx.settings.subnetPool, create);
}
