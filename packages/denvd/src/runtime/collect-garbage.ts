import { Labels } from "@denv/spec/labels";
import { removeRejectRule, ruleNetworkIds } from "../host/firewall.js";
import { transferVolumes } from "../transfer/staging.js";
import type { HostContext } from "./host-context.js";

/**
 * Reconciles Docker with this host's records: removes every container, network, volume,
 * firewall rule, store directory and version image carrying this host's id that no record owns,
 * and its builds that lost their tag to a newer build and that nothing uses.
 */
export async function collectGarbage(ctx: HostContext): Promise<{ removed: string[] }> {
  const { docker, store } = ctx;
  const removed: string[] = [];
  const envs = await ctx.records.environments();
  const versions = await ctx.records.versions();
  const own = { [Labels.managed]: "true", [Labels.host]: ctx.hostId };
  const envIds = new Set(envs.map((e) => e.id));

  const ownedContainers = new Set(envs.flatMap((e) => Object.values(e.containers)));
  for (const c of await docker.containers.list(own)) {
    if (!ownedContainers.has(c.id)) {
      await docker.containers.remove(c.id);
      removed.push(`container ${c.name}`);
    }
  }
  const ownedNetworks = new Set(envs.map((e) => e.network.id));
  for (const n of await docker.networks.list(own)) {
    if (!ownedNetworks.has(n.id) && !ctx.building.has(n.id)) {
      await removeRejectRule(n.id);
      await docker.networks.remove(n.id);
      removed.push(`network ${n.name}`);
    }
  }
  const liveNets = new Set(envs.map((e) => e.network.id.slice(0, 12)));
  const allNets = new Set((await docker.networks.allIds()).map((id) => id.slice(0, 12)));
  for (const short of await ruleNetworkIds()) {
    if (!liveNets.has(short) && !allNets.has(short)) {
      await removeRejectRule(short);
      removed.push(`firewall rule denv:${short}`);
    }
  }
  const ownedVolumes = new Set(envs.flatMap((e) => Object.values(e.volumes).map((v) => v.docker)));
  for (const v of await docker.volumes.list(own)) {
    if (!ownedVolumes.has(v.name) && !envIds.has(v.labels[Labels.environment] ?? "")) {
      await docker.volumes.remove(v.name);
      removed.push(`volume ${v.name}`);
    }
  }
  const liveStore = new Set([
    ...envs.flatMap((e) => Object.values(e.volumes).map((v) => v.store)),
    // Volumes a transfer in progress writes into: its journal owns them until it ends.
    ...(await transferVolumes(ctx)),
  ]);
  for (const id of await store.liveIds()) {
    if (!liveStore.has(id)) {
      await store.removeLive(id);
      removed.push(`store ${id}`);
    }
  }
  const snapStore = new Set(versions.flatMap((v) => Object.values(v.volumes).map((x) => x.snapshot)));
  for (const id of await store.snapshotIds()) {
    if (!snapStore.has(id)) {
      await store.removeSnapshot(id);
      removed.push(`snapshot ${id}`);
    }
  }
  const versionImages = new Set(versions.flatMap((v) => Object.values(v.images).map((i) => i.imageId)));
  for (const img of await docker.images.list(own)) {
    if (img.labels[Labels.role] === "version" && !versionImages.has(img.id)) {
      await docker.images.remove(img.id);
      removed.push(`image ${img.name}`);
    }
  }
  // A build that a newer build of its project took the tag from, once no environment or version of
  // this host uses it and no deploy can still be about to (settings.buildGraceS); an image a container
  // was made from stays (the engine refuses to remove it without force).
  const used = new Set([
    ...versionImages,
    ...envs.flatMap((e) => Object.values(e.images).map((i) => i.imageId)),
  ]);
  const before = Date.now() / 1000 - ctx.settings.buildGraceS;
  for (const img of await docker.images.list({ ...own, [Labels.role]: "build" })) {
    if (img.tagged || used.has(img.id) || img.created > before) continue;
    if (await docker.images.removeUnused(img.id))
      removed.push(`image ${img.id.slice(0, 19)} (an untagged build)`);
  }
  // Versions received from another host carry that host's labels, and this host's own tag.
  const received = `denv-version/${ctx.hostId}-`;
  for (const img of await docker.images.list({ [Labels.managed]: "true", [Labels.role]: "version" })) {
    if (img.name.startsWith(received) && !versionImages.has(img.id)) {
      await docker.images.remove(img.name);
      removed.push(`image ${img.name}`);
    }
  }
  if (removed.length > 0) ctx.log(`gc removed ${removed.length}: ${removed.join(", ")}`);
  return { removed };
}
