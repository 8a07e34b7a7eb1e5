import { randomBytes } from "node:crypto";
import { rejectToHost, removeRejectRule } from "../host/firewall.js";
import type { HostContext } from "../runtime/host-context.js";
import { createOnFreeSubnet } from "../runtime/subnets.js";
import { type MirrorEgress, openMirrorEgress } from "./mirror-egress.js";
import type { ProxyRequest } from "./mirror-proxy.js";

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
  const network = await ctx.locks.with("#subnet", () =>
    createOnFreeSubnet(ctx, ({ subnet, gateway }) =>
      ctx.docker.networks.create({ name, internal: true, subnet, gateway, labels }),
    ),
  );
  ctx.building.add(network.id);
  let egress: MirrorEgress | undefined;
  const close = async () => {
    await egress?.close();
    await removeRejectRule(network.id);
    await ctx.docker.networks.remove(network.id);
    ctx.building.delete(network.id);
  };
  try {
    await rejectToHost(network.id);
    egress = await openMirrorEgress(network, mirrors);
  } catch (err) {
    await close().catch(() => undefined);
    throw err;
  }
  const open = egress;
  return {
    name: network.name,
    buildArgs: open.env,
    evidence: () => ({ network: network.name, ...open.evidence() }),
    close,
  };
}
