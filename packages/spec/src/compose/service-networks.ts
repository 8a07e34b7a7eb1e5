import { ComposeReasons } from "../messages.js";
import type { Refuse } from "./findings.js";
import { describe, isExtensionKey, isInert, isMapping, scalarString, stringList } from "./values.js";

/** `network_mode`: only `none` is accepted; host, joining another container and the rest are refused. */
export function parseNetworkMode(value: unknown, refuse: Refuse): "none" | undefined {
  const key = "network_mode";
  const mode = scalarString(value) ?? "";
  const join = /^(service|container):(.+)$/.exec(mode);
  if (mode === "none") return "none";
  if (mode === "host") refuse(key, ComposeReasons.networkModeHost);
  else if (join !== null) refuse(key, ComposeReasons.networkModeJoin(join[2] ?? ""));
  else refuse(key, ComposeReasons.networkModeOther(mode));
  return undefined;
}

/** A service's `networks` (a list or a mapping): the declared networks it joins and its aliases. */
export function parseServiceNetworks(
  value: unknown,
  refuse: Refuse,
  declared: ReadonlySet<string>,
): { networks: string[]; aliases: string[] } {
  const key = "networks";
  const out = { networks: [] as string[], aliases: [] as string[] };
  const join = (network: string) => {
    if (!declared.has(network)) refuse(key, ComposeReasons.undeclaredNetwork(network));
    else out.networks.push(network);
  };
  if (Array.isArray(value)) {
    for (const item of value) {
      const network = scalarString(item);
      if (network === undefined) refuse(key, ComposeReasons.expected("a network name", describe(item)));
      else join(network);
    }
    return out;
  }
  if (!isMapping(value)) {
    refuse(key, ComposeReasons.expected("a list of networks or a mapping", describe(value)));
    return out;
  }
  for (const [network, spec] of Object.entries(value)) {
    join(network);
    if (spec === null) continue;
    if (!isMapping(spec)) {
      refuse(`${key}.${network}`, ComposeReasons.expected("a mapping with aliases", describe(spec)));
      continue;
    }
    for (const [k, v] of Object.entries(spec)) {
      if (isExtensionKey(k) || v === null) continue;
      if (k === "aliases") {
        const aliases = stringList(v);
        if (aliases === undefined)
          refuse(`${key}.${network}.aliases`, ComposeReasons.expected("a list of names", describe(v)));
        else out.aliases.push(...aliases);
      } else if (!isInert(v)) {
        refuse(`${key}.${network}.${k}`, ComposeReasons.networkOption(k));
      }
    }
  }
  return out;
}
