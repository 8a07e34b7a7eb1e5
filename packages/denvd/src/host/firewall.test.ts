import { randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { afterEach, describe, expect, it } from "vitest";
import { bridgeName, hasRejectRule, rejectToHost, removeRejectRule } from "./firewall.js";
import { run } from "./run.js";

/**
 * The host's reject rules of one environment network (protection 5), on the real INPUT chains:
 * the claim-time check answers true only when every rule of every family is there. The network id
 * is made up: the rules name a bridge that does not exist, which iptables allows.
 */
describe("hasRejectRule", () => {
  const networkId = `${randomBytes(6).toString("hex")}${"0".repeat(52)}`;
  const tools = existsSync("/proc/net/if_inet6") ? ["iptables", "ip6tables"] : ["iptables"];
  afterEach(() => removeRejectRule(networkId));

  it("is true with every rule in place, and false when any one of them is gone", async () => {
    expect(await hasRejectRule(networkId)).toBe(false);
    await rejectToHost(networkId);
    expect(await hasRejectRule(networkId)).toBe(true);
    const tag = ["-m", "comment", "--comment", `denv:${networkId.slice(0, 12)}`];
    for (const tool of tools) {
      // The TCP reset rule removed (as a tampering admin or a flushed chain would): caught.
      const tcp = ["INPUT", "-i", bridgeName(networkId), "-p", "tcp", ...tag, "-j", "REJECT"];
      expect((await run(tool, ["-w", "-D", ...tcp, "--reject-with", "tcp-reset"])).code).toBe(0);
      expect(await hasRejectRule(networkId), tool).toBe(false);
      await rejectToHost(networkId);
      expect(await hasRejectRule(networkId), tool).toBe(true);
    }
    await removeRejectRule(networkId);
    expect(await hasRejectRule(networkId)).toBe(false);
  });

  it("finds a rule inserted with the states spelled the other way (a host's older rules)", async () => {
    await rejectToHost(networkId);
    const head = ["INPUT", "-i", bridgeName(networkId), "-m", "conntrack", "--ctstate"];
    const tag = ["-m", "comment", "--comment", `denv:${networkId.slice(0, 12)}`, "-j", "ACCEPT"];
    expect((await run("iptables", ["-w", "-D", ...head, "RELATED,ESTABLISHED", ...tag])).code).toBe(0);
    expect((await run("iptables", ["-w", "-I", ...head, "ESTABLISHED,RELATED", ...tag])).code).toBe(0);
    expect(await hasRejectRule(networkId)).toBe(true);
  });
});
