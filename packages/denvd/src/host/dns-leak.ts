import { readFile } from "node:fs/promises";

/**
 * CVE-2024-29018: the embedded DNS server of engines before 23.0.11, 25.0.5 and 26.0.0 forwards
 * the names containers on an *internal* network ask for to the host's resolver from the host's
 * own network namespace when that resolver is on loopback, so names (and data in them) leave
 * an environment that has no route out.
 */
export function engineLeaksInternalDns(engineVersion: string): boolean {
  const [major = 0, minor = 0, patch = 0] = (engineVersion.match(/^(\d+)\.(\d+)\.(\d+)/) ?? [])
    .slice(1)
    .map(Number);
  if (major === 0) return false;
  if (major < 23) return true;
  if (major === 23) return minor === 0 && patch < 11;
  if (major === 24) return true;
  if (major === 25) return minor === 0 && patch < 5;
  return false;
}

/** The host's nameservers on loopback (where a leaking engine forwards from the host's namespace). */
export async function loopbackNameservers(resolvConf = "/etc/resolv.conf"): Promise<string[]> {
  const text = await readFile(resolvConf, "utf8").catch(() => "");
  return [...text.matchAll(/^nameserver\s+(\S+)/gm)]
    .map((m) => m[1] as string)
    .filter((ns) => ns.startsWith("127.") || ns === "::1");
}
