import { join } from "node:path";
import { ExitCodes } from "@denv/spec";
import { readHostFile } from "../agent/host-file.js";
import { Journal } from "../agent/journal.js";
import type { DenvdConfig } from "../config.js";
import { RecordStore } from "../records.js";
import type { Output } from "./output.js";

/**
 * `denvd status`: what this host is and holds, read from the state dir only (host.json, the
 * records, the journal). It opens no runtime, so it neither needs Docker nor collects anything,
 * and it is safe to run beside `denvd run`.
 */
export async function status(config: DenvdConfig, out: Output): Promise<number> {
  const host = await readHostFile(config.stateDir).catch((err: Error) => err);
  if (host instanceof Error) return out.fail(host.message);
  const records = new RecordStore(join(config.stateDir, "records"));
  const orEmpty = <T>(p: Promise<T[]>) =>
    p.catch((err: NodeJS.ErrnoException) => {
      if (err.code === "ENOENT") return [] as T[];
      throw err;
    });
  const environments = (await orEmpty(records.environments())).sort((a, b) => a.id.localeCompare(b.id));
  const versions = (await orEmpty(records.versions())).sort(
    (a, b) => a.project.localeCompare(b.project) || a.number - b.number,
  );
  const journal = await Journal.open(join(config.stateDir, "journal"), { create: false });
  const entries = await journal.all();
  const unfinished = entries.filter((e) => e.state !== "done").map((e) => e.id);

  const json = {
    host_id: host.host_id,
    target: host.target,
    url: host.url,
    state_dir: config.stateDir,
    environments: environments.map((e) => ({
      id: e.id,
      status: e.status,
      parent_version: e.parentVersion,
      services: Object.keys(e.containers),
      created_at: e.createdAt,
    })),
    versions: versions.map((v) => ({
      id: v.id,
      method: v.method,
      layer_bytes: v.sizes.layerBytes,
      volume_bytes: v.sizes.volumeBytes,
      created_at: v.createdAt,
    })),
    journal: { done: entries.length - unfinished.length, unfinished },
  };
  const lines = [
    `host          ${host.host_id} (target ${host.target})`,
    `control plane ${host.url}`,
    `state dir     ${config.stateDir}`,
    `environments  ${environments.length}`,
    ...json.environments.map((e) => `  ${e.id}  ${e.status}  services: ${e.services.join(", ")}`),
    `versions      ${versions.length}`,
    ...json.versions.map((v) => `  ${v.id}  ${v.method}  ${v.layer_bytes + v.volume_bytes} bytes`),
    `journal       ${json.journal.done} done, ${unfinished.length} unfinished`,
  ];
  out.result(json, lines.join("\n"));
  return ExitCodes.ok;
}
