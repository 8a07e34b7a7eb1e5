import { isIP } from "node:net";
import { TransferMessages } from "@denv/spec";

/**
 * Which way a version goes from host to host (docs/reference/protocol.md#direct-transfers): the
 * relay through the control plane, or a direct connection from the sender to the receiver's
 * transfer listener. A host says where its listener is in hello; what it says is taken only when
 * it is the address its own connection comes from (or "any address", which then means that one),
 * so a host cannot send another host's bytes to a third machine by naming its address.
 */

export type TransferPathSetting = "relay" | "direct" | "auto";

/** What the control plane made of a host's `transfer_listen`. */
export type DirectRoute = { address: string } | { refused: string };

/** The peer address of a connection as the socket reports it (IPv4-mapped IPv6 as IPv4). */
export function peerIp(remote: string | undefined): string | undefined {
  if (!remote) return undefined;
  const v4 = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(remote);
  return v4?.[1] ?? remote;
}

/** A host's advertised listener, checked against the address its connection comes from. */
export function directRoute(
  hostId: string,
  advertised: string | undefined,
  peer: string | undefined,
): DirectRoute | undefined {
  if (advertised === undefined) return undefined;
  const m = /^(?:\[([0-9a-fA-F:.]+)\]|([0-9.]+)):(\d{1,5})$/.exec(advertised);
  const host = m?.[1] ?? m?.[2];
  const port = Number(m?.[3]);
  if (!host || isIP(host) === 0 || !(port >= 1 && port <= 65535))
    return { refused: `host ${hostId} advertises transfer address '${advertised}', which is not IP:PORT` };
  const from = peerIp(peer);
  if (!from) return { refused: `host ${hostId}'s connection has no peer address` };
  const bracket = (ip: string) => (isIP(ip) === 6 ? `[${ip}]` : ip);
  if (host === "0.0.0.0" || host === "::") {
    if (isIP(from) !== isIP(host))
      return { refused: TransferMessages.directAddressRefused(hostId, advertised, from) };
    return { address: `${bracket(from)}:${port}` };
  }
  if (host.toLowerCase() !== from.toLowerCase())
    return { refused: TransferMessages.directAddressRefused(hostId, advertised, from) };
  return { address: `${bracket(host)}:${port}` };
}

export type PathChoice =
  | { path: "direct"; address: string; reason: string }
  | { path: "relay"; reason: string }
  | { path: "none"; reason: string };

/** The path of one attempt: `setting`, what the receiver offers, and whether direct failed already. */
export function choosePath(
  setting: TransferPathSetting,
  to: string,
  route: DirectRoute | undefined,
  directFailed?: string,
): PathChoice {
  if (setting === "relay") return { path: "relay", reason: "the control plane's transfer path is relay" };
  if (setting === "auto" && directFailed !== undefined)
    return { path: "relay", reason: `auto: a direct attempt failed (${directFailed}); relay` };
  if (route && "address" in route)
    return {
      path: "direct",
      address: route.address,
      reason: `${setting}: ${to} takes direct transfers at ${route.address}`,
    };
  const why = route ? route.refused : `host ${to} has no transfer listener (denvd --transfer-listen)`;
  return setting === "auto"
    ? { path: "relay", reason: `auto: ${why}; relay` }
    : { path: "none", reason: why };
}
