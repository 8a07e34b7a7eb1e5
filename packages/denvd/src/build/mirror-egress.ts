import { allowHostPort, removeHostPort } from "../host/firewall.js";
import { MirrorProxy, type ProxyRequest } from "./mirror-proxy.js";

/**
 * The one way out of an internal network while a phase runs (a build, a verifier): denvd's
 * mirror proxy on the network's gateway, and a firewall opening for its port alone above the
 * network's reject rules. Everything else stays refused; every request is evidence.
 */
export interface MirrorEgress {
  /** The proxy's URL on the network's gateway. */
  url: string;
  port: number;
  /** http_proxy and friends for what runs on the network. */
  env: Record<string, string>;
  evidence(): { mirrors: readonly string[]; requests: ProxyRequest[] };
  close(): Promise<void>;
}

export async function openMirrorEgress(
  network: { id: string; gateway: string },
  mirrors: readonly string[],
  port = 0,
): Promise<MirrorEgress> {
  const proxy = await MirrorProxy.start(network.gateway, mirrors, port);
  try {
    await allowHostPort(network.id, network.gateway, proxy.port);
  } catch (err) {
    await proxy.close();
    throw err;
  }
  const url = proxy.url;
  return {
    url,
    port: proxy.port,
    env: { http_proxy: url, https_proxy: url, HTTP_PROXY: url, HTTPS_PROXY: url },
    evidence: () => ({ mirrors, requests: [...proxy.requests] }),
    close: async () => {
      await proxy.close();
      await removeHostPort(network.id, network.gateway, proxy.port);
    },
  };
}
