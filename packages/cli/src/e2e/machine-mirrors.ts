import { execFile } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { isIPv4 } from "node:net";
import path from "node:path";
import { promisify } from "node:util";
import { PREFIX } from "./hosts-teardown.js";

const sh = promisify(execFile);

/**
 * The package mirrors `hosts` (a machine's apt sources: denvd's hostMirrors of its image), and
 * nothing else beyond the fixture's bridge:
 * each mirror host is resolved here (as this machine's resolver answers), named in the machine's
 * /etc/hosts, routed through the bridge's gateway, and let out by this machine's firewall for TCP
 * 80 and 443 to those addresses only, masqueraded (rules commented `dvt<id>`, which the
 * fixture's teardown removes). What the machine's denvd builds installs Debian packages through
 * its own mirror proxy, which connects to them; installing packages is the one traffic a test
 * may send beyond what it created. Returns the addresses let out.
 */
export async function openMirrors(o: {
  id: string;
  netns: string;
  address: string;
  gateway: string;
  /** The mirrors' host names. */
  hosts: readonly string[];
  /** The machine image's root filesystem (its /etc/hosts). */
  lower: string;
  /** The machine's overlay upper folder (its /etc/hosts goes there). */
  upper: string;
}): Promise<string[]> {
  const named: string[] = [];
  const addresses = new Set<string>();
  for (const host of o.hosts) {
    const out = (await sh("getent", ["ahostsv4", host]).catch(() => ({ stdout: "" }))).stdout;
    const ips = [...new Set(out.split("\n").map((l) => l.split(/\s+/)[0] ?? ""))].filter((ip) => isIPv4(ip));
    if (ips.length === 0) throw new Error(`package mirror ${host} does not resolve here`);
    for (const ip of ips) {
      named.push(`${ip} ${host}`);
      addresses.add(ip);
    }
  }
  const lowerHosts = path.join(o.lower, "etc/hosts");
  const base = existsSync(lowerHosts) ? readFileSync(lowerHosts, "utf8") : "";
  mkdirSync(path.join(o.upper, "etc"), { recursive: true });
  writeFileSync(
    path.join(o.upper, "etc/hosts"),
    `${base.trim() || "127.0.0.1 localhost"}\n${named.join("\n")}\n`,
  );
  const comment = ["-m", "comment", "--comment", `${PREFIX}${o.id}`];
  for (const ip of addresses) {
    await sh("ip", ["-n", o.netns, "route", "add", `${ip}/32`, "via", o.gateway]);
    await sh("iptables", [
      "-w",
      "-I",
      "FORWARD",
      "-s",
      o.address,
      "-d",
      ip,
      "-p",
      "tcp",
      "-m",
      "multiport",
      "--dports",
      "80,443",
      ...comment,
      "-j",
      "ACCEPT",
    ]);
    await sh("iptables", [
      "-w",
      "-I",
      "FORWARD",
      "-s",
      ip,
      "-d",
      o.address,
      "-m",
      "conntrack",
      "--ctstate",
      "ESTABLISHED,RELATED",
      ...comment,
      "-j",
      "ACCEPT",
    ]);
    await sh("iptables", [
      "-w",
      "-t",
      "nat",
      "-I",
      "POSTROUTING",
      "-s",
      o.address,
      "-d",
      ip,
      ...comment,
      "-j",
      "MASQUERADE",
    ]);
  }
  return [...addresses];
}
