import { describe, expect, it } from "vitest";
import { freeSubnet, onFreeSubnet, SUBNET_ATTEMPTS, type SubnetEngine } from "./subnets.js";

const POOL = "10.213.0.0/16";
const engine = (used: string[]): SubnetEngine => ({ usedSubnets: async () => used });

describe("free subnets on an engine shared with other runtimes", () => {
  it("picks a /24 of the pool that no network uses and that is not skipped", async () => {
    const used = Array.from({ length: 254 }, (_, c) => `10.213.${c}.0/24`);
    const net = await freeSubnet(engine(used), POOL, new Set(["10.213.254.0/24"]));
    expect(net).toEqual({ subnet: "10.213.255.0/24", gateway: "10.213.255.1" });
    await expect(
      freeSubnet(engine([...used, "10.213.255.0/24"]), POOL, new Set(["10.213.254.0/24"])),
    ).rejects.toThrow("no free /24 left in the subnet pool 10.213.0.0/16");
  });

  it("starts at a random /24: two runtimes looking at once rarely pick the same one", async () => {
    const picks = new Set<string>();
    for (let i = 0; i < 20; i++) picks.add((await freeSubnet(engine([]), POOL)).subnet);
    expect(picks.size).toBeGreaterThan(10);
  });

  it("looks again past a /24 the engine refuses as overlapping, even one its list does not show", async () => {
    // The engine still holds the pool of a network it just removed (or another runtime took it):
    // the first two /24s tried overlap, although the list stays empty.
    const tried: string[] = [];
    const net = await onFreeSubnet(engine([]), POOL, async ({ subnet }) => {
      tried.push(subnet);
      if (tried.length <= 2)
        throw new Error("create network x: Pool overlaps with other one on this address space");
      return subnet;
    });
    expect(tried).toHaveLength(3);
    expect(new Set(tried).size).toBe(3);
    expect(net).toBe(tried[2]);
  });

  it(`gives up after ${SUBNET_ATTEMPTS} overlaps, and at once on any other error`, async () => {
    let calls = 0;
    await expect(
      onFreeSubnet(engine([]), POOL, async () => {
        calls++;
        throw new Error("Pool overlaps with other one on this address space");
      }),
    ).rejects.toThrow(/overlaps/);
    expect(calls).toBe(SUBNET_ATTEMPTS);
    calls = 0;
    await expect(
      onFreeSubnet(engine([]), POOL, async () => {
        calls++;
        throw new Error("permission denied");
      }),
    ).rejects.toThrow("permission denied");
    expect(calls).toBe(1);
  });
});
