import { existsSync } from "node:fs";
import { mkdir, readFile, rm, stat } from "node:fs/promises";
import { join } from "node:path";
import { run, runOk } from "./host/run.js";

/**
 * Where environment volumes live on the host. Live volumes and their snapshots are directories
 * of one store; Docker sees each live volume as a `local` volume bound to its directory.
 *
 * The fastest copy-on-write the host offers is used: a btrfs filesystem in a loop file that
 * denvd creates (subvolume snapshots: constant time, independent of size and file count; see
 * MEASUREMENTS), else a plain directory with `cp -a --reflink=auto`.
 */
export type StoreMethod = "btrfs" | "copy";

export interface VolumeStore {
  readonly method: StoreMethod;
  readonly root: string;
  /** Whether live volumes can be capped (btrfs quota groups); a full volume is then its own EDQUOT. */
  readonly canCap: boolean;
  /** Creates an empty live volume, capped at `capBytes` where the store can; returns its host path. */
  create(id: string, capBytes?: number): Promise<string>;
  /** Read-only point-in-time copy of a live volume. */
  snapshot(liveId: string, snapId: string): Promise<void>;
  /** A new live volume from a snapshot (writable; the snapshot is untouched), capped like create. */
  clone(snapId: string, liveId: string, capBytes?: number): Promise<string>;
  livePath(id: string): string;
  snapPath(id: string): string;
  removeLive(id: string): Promise<void>;
  removeSnapshot(id: string): Promise<void>;
  /** Bytes used by a path (apparent size). */
  size(path: string): Promise<number>;
  /** Flushes dirty data of a live volume to disk, so a freeze is short. */
  flush(id: string): Promise<void>;
  liveIds(): Promise<string[]>;
  snapshotIds(): Promise<string[]>;
}

export interface StoreOptions {
  dir: string;
  /** "auto" tries btrfs then falls back to copy. */
  method: "auto" | StoreMethod;
  /** Size of the btrfs loop file (sparse). */
  loopSizeBytes: number;
}

export async function openVolumeStore(opts: StoreOptions): Promise<VolumeStore> {
  await mkdir(opts.dir, { recursive: true });
  if (opts.method !== "copy") {
    const mounted = await mountBtrfs(opts.dir, opts.loopSizeBytes).catch((err: Error) => err);
    if (typeof mounted === "string") return new BtrfsStore(mounted);
    if (opts.method === "btrfs") throw new Error(`the btrfs volume store is unavailable: ${mounted.message}`);
  }
  const root = join(opts.dir, "plain");
  await mkdir(join(root, "live"), { recursive: true });
  await mkdir(join(root, "snap"), { recursive: true });
  return new CopyStore(root);
}

async function mountBtrfs(dir: string, sizeBytes: number): Promise<string> {
  const mnt = join(dir, "btrfs");
  const img = join(dir, "volumes.btrfs");
  const mounts = await readFile("/proc/mounts", "utf8");
  if (!mounts.split("\n").some((l) => l.split(" ")[1] === mnt)) {
    if (!existsSync(img)) {
      await runOk("truncate", ["-s", String(sizeBytes), img]);
      await runOk("mkfs.btrfs", ["-q", img]);
    }
    await mkdir(mnt, { recursive: true });
    await runOk("mount", ["-o", "loop,noatime", img, mnt]);
  }
  await mkdir(join(mnt, "live"), { recursive: true });
  await mkdir(join(mnt, "snap"), { recursive: true });
  // Quota groups cap each live volume; snapshots stay constant time (measured: ~3 ms).
  await runOk("btrfs", ["quota", "enable", mnt]);
  return mnt;
}

abstract class BaseStore {
  constructor(readonly root: string) {}
  livePath(id: string): string {
    return join(this.root, "live", id);
  }
  snapPath(id: string): string {
    return join(this.root, "snap", id);
  }
  async size(path: string): Promise<number> {
    const r = await run("du", ["-sb", path]);
    return r.code === 0 ? Number(r.stdout.split("\t")[0]) : 0;
  }
  async flush(id: string): Promise<void> {
    await run("sync", ["-f", this.livePath(id)]);
  }
  async liveIds(): Promise<string[]> {
    return (await run("ls", [join(this.root, "live")])).stdout.split("\n").filter(Boolean);
  }
  async snapshotIds(): Promise<string[]> {
    return (await run("ls", [join(this.root, "snap")])).stdout.split("\n").filter(Boolean);
  }
}

class BtrfsStore extends BaseStore implements VolumeStore {
  readonly method = "btrfs" as const;
  readonly canCap = true;

  async create(id: string, capBytes?: number): Promise<string> {
    const p = this.livePath(id);
    await runOk("btrfs", ["subvolume", "create", p]);
    await this.cap(p, capBytes);
    return p;
  }
  private async cap(path: string, bytes: number | undefined): Promise<void> {
    if (bytes !== undefined) await runOk("btrfs", ["qgroup", "limit", String(bytes), path]);
  }
  async snapshot(liveId: string, snapId: string): Promise<void> {
    await runOk("btrfs", ["subvolume", "snapshot", "-r", this.livePath(liveId), this.snapPath(snapId)]);
  }
  async clone(snapId: string, liveId: string, capBytes?: number): Promise<string> {
    const p = this.livePath(liveId);
    await runOk("btrfs", ["subvolume", "snapshot", this.snapPath(snapId), p]);
    await this.cap(p, capBytes);
    return p;
  }
  async removeLive(id: string): Promise<void> {
    await deleteSubvolume(this.livePath(id));
  }
  async removeSnapshot(id: string): Promise<void> {
    await deleteSubvolume(this.snapPath(id));
  }
}

async function deleteSubvolume(p: string): Promise<void> {
  if (!existsSync(p)) return;
  const r = await run("btrfs", ["subvolume", "delete", p]);
  // A directory that is not a subvolume (an interrupted create) is removed as a directory.
  if (r.code !== 0) await rm(p, { recursive: true, force: true });
}

class CopyStore extends BaseStore implements VolumeStore {
  readonly method = "copy" as const;
  readonly canCap = false;

  async create(id: string): Promise<string> {
    const p = this.livePath(id);
    await mkdir(p, { recursive: true });
    return p;
  }
  async snapshot(liveId: string, snapId: string): Promise<void> {
    await runOk("cp", ["-a", "--reflink=auto", this.livePath(liveId), this.snapPath(snapId)]);
  }
  async clone(snapId: string, liveId: string): Promise<string> {
    const p = this.livePath(liveId);
    await runOk("cp", ["-a", "--reflink=auto", this.snapPath(snapId), p]);
    return p;
  }
  async removeLive(id: string): Promise<void> {
    await rm(this.livePath(id), { recursive: true, force: true });
  }
  async removeSnapshot(id: string): Promise<void> {
    if ((await stat(this.snapPath(id)).catch(() => undefined)) === undefined) return;
    await rm(this.snapPath(id), { recursive: true, force: true });
  }
}
