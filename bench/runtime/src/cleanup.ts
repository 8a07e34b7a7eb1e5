import { existsSync } from "node:fs";
import { readFile, rm, rmdir } from "node:fs/promises";
import { dirname, join } from "node:path";
import { Runtime } from "@denv/denvd";
import type Docker from "dockerode";
import { run } from "./host.js";

/** Labels of what the benchmark itself creates next to denv (baselines, floors). */
export function probeLabels(runId: string): Record<string, string> {
  return { "ai.denv.managed": "true", "ai.denv.role": "probe", "ai.denv.bench.run": runId };
}

async function isMounted(path: string): Promise<boolean> {
  const mounts = await readFile("/proc/mounts", "utf8");
  return mounts.split("\n").some((l) => l.split(" ")[1] === path);
}

/**
 * Everything a runtime holds goes: environments, versions (newest first), then gc, the canary,
 * the store's btrfs mount and the state directory.
 */
export async function teardownRuntime(rt: Runtime, stateDir: string): Promise<string[]> {
  const problems: string[] = [];
  for (const e of await rt.host.records.environments().catch(() => [])) {
    await rt.destroy(e.id).catch((err: Error) => problems.push(`destroy ${e.id}: ${err.message}`));
  }
  const versions = (await rt.host.records.versions().catch(() => [])).sort((a, b) => b.number - a.number);
  for (const v of versions) {
    await rt.deleteVersion(v.id).catch((err: Error) => problems.push(`delete ${v.id}: ${err.message}`));
  }
  await rt.gc().catch((err: Error) => problems.push(`gc: ${err.message}`));
  await rt.close().catch(() => undefined);
  problems.push(...(await removeStateDir(stateDir)));
  return problems;
}

async function removeStateDir(stateDir: string): Promise<string[]> {
  const problems: string[] = [];
  const mnt = join(stateDir, "store", "btrfs");
  if (await isMounted(mnt)) {
    const r = await run("umount", [mnt]);
    if (r.code !== 0) problems.push(`umount ${mnt}: ${r.stderr.trim()}`);
  }
  if (!(await isMounted(mnt))) await rm(stateDir, { recursive: true, force: true });
  else problems.push(`${stateDir} kept: its store is still mounted`);
  // The parent (/var/lib/denvd-bench) goes when it is empty.
  await rmdir(dirname(stateDir)).catch(() => undefined);
  return problems;
}

/** A host the benchmark used but whose runtime is not open here (a child's, or after a crash). */
export async function teardownHost(hostId: string, stateDir: string): Promise<string[]> {
  if (!existsSync(stateDir)) return [];
  let rt: Runtime;
  try {
    rt = await Runtime.open({ hostId, stateDir });
  } catch (err) {
    return [`open ${hostId} for cleanup: ${(err as Error).message}`, ...(await removeStateDir(stateDir))];
  }
  return teardownRuntime(rt, stateDir);
}

/**
 * Last line of defence: removes every container, network, volume and image that carries one of
 * the benchmark's host ids or its run label. Returns what it had to remove (should be empty).
 */
export async function sweep(docker: Docker, hostIds: string[], runId: string): Promise<string[]> {
  const removed: string[] = [];
  const filters = [...hostIds.map((h) => `ai.denv.host=${h}`), `ai.denv.bench.run=${runId}`].map((f) =>
    JSON.stringify({ label: [f] }),
  );
  for (const filter of filters) {
    for (const c of await docker.listContainers({ all: true, filters: filter })) {
      await docker
        .getContainer(c.Id)
        .remove({ force: true, v: true })
        .catch(() => undefined);
      removed.push(`container ${c.Names[0] ?? c.Id}`);
    }
  }
  for (const filter of filters) {
    for (const n of await docker.listNetworks({ filters: filter })) {
      await docker
        .getNetwork(n.Id)
        .remove()
        .catch(() => undefined);
      removed.push(`network ${n.Name}`);
    }
    const vols = await docker.listVolumes({ filters: filter });
    for (const v of vols.Volumes ?? []) {
      await docker
        .getVolume(v.Name)
        .remove({ force: true })
        .catch(() => undefined);
      removed.push(`volume ${v.Name}`);
    }
    for (const i of await docker.listImages({ filters: filter })) {
      await docker
        .getImage(i.Id)
        .remove({ force: true })
        .catch(() => undefined);
      removed.push(`image ${i.RepoTags?.[0] ?? i.Id}`);
    }
  }
  return removed;
}
