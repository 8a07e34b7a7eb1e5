import { createHash } from "node:crypto";
import { readFile } from "node:fs/promises";
import { join, resolve, sep } from "node:path";
import { DenvError, type ServicePlan } from "@denv/spec";
import { hashTree, slug, templatePrefix } from "../e2b/build-template.js";
import { type DaytonaHost, PROVIDER, provider } from "./daytona-host.js";
import { loadDaytona } from "./daytona-sdk.js";

/** What a snapshot is built from: a service's build or image, and its caps. */
export type SnapshotSource = Pick<ServicePlan, "name" | "build" | "image" | "resources">;

/**
 * The Daytona snapshot (Daytona's name for a sandbox image) of a service, built by Daytona from
 * the service's Dockerfile and build context (`Image.fromDockerfile`: the SDK uploads the context
 * to Daytona's object storage) or from its image (`Image.base`), with the service's cpu and memory
 * caps. Its name is `denv-<host>-<project>-<content hash>`, the hash over the Dockerfile, every
 * file of the context and the caps, so the same content reuses the snapshot and any change builds
 * a new one.
 */
export async function buildSnapshot(
  host: DaytonaHost,
  input: { project: string; projectDir: string; service: SnapshotSource; onLog?: (line: string) => void },
): Promise<{ name: string; built: boolean }> {
  const { Image } = await loadDaytona();
  const svc = input.service;
  const cpu = Math.max(1, Math.ceil(svc.resources.cpus));
  // Daytona takes memory in whole GiB.
  const memory = Math.max(1, Math.ceil(svc.resources.memoryBytes / 1024 ** 3));
  const hash = createHash("sha256");
  hash.update(JSON.stringify({ cpu, memory }));
  let image: import("@daytonaio/sdk").Image;
  if (svc.build) {
    const root = resolve(input.projectDir);
    const context = resolve(root, svc.build.context);
    if (context !== root && !context.startsWith(root + sep)) {
      throw new DenvError("invalid_compose", `service '${svc.name}': build context is outside the project`);
    }
    const dockerfile = join(context, svc.build.dockerfile);
    hash.update(`dockerfile\0${await readFile(dockerfile, "utf8")}\0`);
    await hashTree(hash, context);
    image = Image.fromDockerfile(dockerfile);
  } else {
    hash.update(`image\0${svc.image}\0`);
    image = Image.base(svc.image);
  }
  const name = `${templatePrefix(host.hostId)}${slug(input.project, 24)}-${hash.digest("hex").slice(0, 16)}`;
  const existing = await settled(host, name);
  if (existing?.state === "active") return { name, built: false };
  // Failed or deactivated: built again under the same name.
  if (existing) await provider(() => host.client.snapshot.delete(existing));
  const { DaytonaConflictError } = await loadDaytona();
  try {
    await host.client.snapshot.create(
      { name, image, resources: { cpu, memory } },
      { ...(input.onLog ? { onLogs: input.onLog } : {}) },
    );
  } catch (e) {
    // Another deploy of the same content asked first: its build, once done, is this one's.
    const theirs = e instanceof DaytonaConflictError && (await settled(host, name))?.state === "active";
    if (!theirs) return provider(() => Promise.reject(e));
    return { name, built: false };
  }
  return { name, built: true };
}

/** How long a deploy waits for another's build of the same snapshot. */
const SETTLE_TIMEOUT_MS = 30 * 60_000;

/** States of a snapshot that another deploy is still making (or Daytona still removing). */
const UNSETTLED = new Set(["pending", "building", "pulling", "snapshotting", "removing"]);

/**
 * The snapshot of that name once no one is making it any more: a deploy of the same content
 * (another environment of the project) waits for that build instead of deleting it under it.
 */
async function settled(host: DaytonaHost, name: string) {
  const deadline = Date.now() + SETTLE_TIMEOUT_MS;
  for (;;) {
    const s = await host.client.snapshot.get(name).catch(() => undefined);
    if (!s || !UNSETTLED.has(s.state)) return s;
    if (Date.now() > deadline) {
      throw new DenvError("timeout", `${PROVIDER}: snapshot ${name} is still ${s.state} after 30 minutes`);
    }
    await new Promise((r) => setTimeout(r, 1000));
  }
}
