import { randomBytes } from "node:crypto";
import { allowHostPort, rejectToHost, removeHostPort, removeRejectRule } from "../host/firewall.js";
import type { HostContext } from "../runtime/host-context.js";
import { freeSubnet } from "../runtime/subnets.js";
import { MirrorProxy, type ProxyRequest } from "./mirror-proxy.js";

/**
 * Where the RUN steps of an rl-environment's builds run: an internal network of their own (no
 * route off the machine, every host port rejected) whose only way out is denvd's mirror proxy
 * on the gateway, which forwards to the package mirrors this host is configured for.
 */
export interface BuildNetwork {
  name: string;
  /** http_proxy and friends, as build arguments (Docker keeps them out of the image's history). */
  buildArgs: Record<string, string>;
  /** Evidence: the network, the mirrors and every request the builds made. */
  evidence(): { network: string; mirrors: readonly string[]; requests: ProxyRequest[] };
  close(): Promise<void>;
}

export async function openBuildNetwork(
  ctx: HostContext,
  project: string,
  command: string,
  mirrors: readonly string[],
): Promise<BuildNetwork> {
  const name = ctx.dockerName(project, `build-${randomBytes(3).toString("hex")}`);
  const labels = ctx.labels({ project, id: `${project}/build` }, "build", command);
  const network = await ctx.locks.with("#subnet", async () => {
    const { subnet, gateway } = await freeSubnet(ctx);
    return ctx.docker.networks.create({ name, internal: true, subnet, gateway, labels });
  });
  ctx.building.add(network.id);
  let proxy: MirrorProxy | undefined;
  const close = async () => {
    await proxy?.close();
    if (proxy) await removeHostPort(network.id, network.gateway, proxy.port);
    await removeRejectRule(network.id);
    await ctx.docker.networks.remove(network.id);
    ctx.building.delete(network.id);
  };
  try {
    await rejectToHost(network.id);
    proxy = await MirrorProxy.start(network.gateway, mirrors);
    await allowHostPort(network.id, network.gateway, proxy.port);
  } catch (err) {
    await close().catch(() => undefined);
    throw err;
  }
  const url = proxy.url;
  const used = proxy;
  return {
    name: network.name,
    buildArgs: { http_proxy: url, https_proxy: url, HTTP_PROXY: url, HTTPS_PROXY: url },
    evidence: () => ({ network: network.name, mirrors, requests: [...used.requests] }),
    close,
  };
}
