import { existsSync } from "node:fs";
import { readdir, readFile, rename, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import type { TransferResume } from "@denv/spec";
import type { HostContext } from "../runtime/host-context.js";

/**
 * A received transfer's staging directory and its journal (receive.ts writes them): what gc
 * and version removal need of a transfer in progress, without the transfer's own code, which
 * denvd loads only when a version arrives.
 */

export interface Journal {
  version: string;
  from: string;
  manifest_sha: string;
  done: string[];
  current?: NonNullable<TransferResume["current"]>;
  /** Store volumes made for volume parts, by volume name. */
  volumes: Record<string, string>;
  /** Bytes received and kept by earlier attempts. */
  bytes: number;
}

/** A name as one path component (a version id, a part name). */
export const slug = (name: string) => name.replace(/[^A-Za-z0-9_.-]/g, "_");

export function stagingDir(ctx: HostContext, versionId: string): string {
  return join(ctx.stateDir, "transfers", slug(versionId));
}

export async function readJournal(dir: string): Promise<Journal | undefined> {
  const text = await readFile(join(dir, "journal.json"), "utf8").catch(() => undefined);
  return text ? (JSON.parse(text) as Journal) : undefined;
}

export async function writeJournal(dir: string, j: Journal): Promise<void> {
  await writeFile(join(dir, "journal.tmp"), JSON.stringify(j));
  await rename(join(dir, "journal.tmp"), join(dir, "journal.json"));
}

/** Store volumes that transfers in progress write into (gc must leave them). */
export async function transferVolumes(ctx: HostContext): Promise<string[]> {
  const root = join(ctx.stateDir, "transfers");
  if (!existsSync(root)) return [];
  const out: string[] = [];
  for (const d of await readdir(root)) {
    const j = await readJournal(join(root, d)).catch(() => undefined);
    if (j) out.push(...Object.values(j.volumes));
  }
  return out;
}

/** Removes what a transfer of `versionId` left (an abandoned attempt). */
export async function discardTransfer(ctx: HostContext, versionId: string): Promise<boolean> {
  const dir = stagingDir(ctx, versionId);
  const j = await readJournal(dir).catch(() => undefined);
  if (!j && !existsSync(dir)) return false;
  for (const live of Object.values(j?.volumes ?? {})) await ctx.store.removeLive(live);
  await rm(dir, { recursive: true, force: true });
  return true;
}
