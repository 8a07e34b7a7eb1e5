import { randomBytes } from "node:crypto";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { Labels } from "@denv/spec/labels";
import { run } from "../host/run.js";
import type { RuntimeOptions } from "../runtime/host-context.js";
import { Runtime } from "../runtime/runtime.js";
import { rememberProject } from "./written-projects.js";

/**
 * A runtime of its own for one test file: a fresh host id (so gc touches nothing else), its own
 * state dir and volume store; disposal destroys what it holds and unmounts the store.
 */
export async function openTestRuntime(
  opts: Partial<RuntimeOptions> = {},
): Promise<Runtime & AsyncDisposable> {
  const hostId = `t${randomBytes(3).toString("hex")}`;
  const stateDir = join("/var/lib/denvd-test", hostId);
  const rt = await Runtime.open({ hostId, stateDir, ...opts });
  const close = rt.close.bind(rt);
  rt.close = async () => {
    for (const e of await rt.host.records.environments()) await rt.destroy(e.id).catch(() => undefined);
    for (const v of (await rt.host.records.versions()).sort((a, b) => b.number - a.number)) {
      await rt.deleteVersion(v.id).catch(() => undefined);
    }
    await rt.gc();
    // The host goes with the test file, and so do its builds: left behind, the next test host's
    // build of the project would take their tag and leave them untagged for good.
    const builds = { [Labels.managed]: "true", [Labels.host]: hostId, [Labels.role]: "build" };
    for (const img of await rt.host.docker.images.list(builds))
      await rt.host.docker.images.removeUnused(img.id);
    await close();
    await run("umount", [join(stateDir, "store", "btrfs")]);
    await rm(stateDir, { recursive: true, force: true });
  };
  return rt as Runtime & AsyncDisposable;
}

/** Writes a project directory from a map of relative paths to contents. */
export async function writeProject(files: Record<string, string>): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), "denv-project-"));
  rememberProject(dir);
  for (const [rel, content] of Object.entries(files)) {
    await mkdir(dirname(join(dir, rel)), { recursive: true });
    await writeFile(join(dir, rel), content);
  }
  return dir;
}

export const BASE_IMAGE = "debian:bookworm-slim";

/** Counts Docker objects labelled with a host id (what a test must leave at zero). */
export async function leftovers(rt: Runtime): Promise<number> {
  const own = { "ai.denv.host": rt.host.hostId };
  const c = await rt.host.docker.containers.list(own);
  const n = await rt.host.docker.networks.list(own);
  const v = await rt.host.docker.volumes.list(own);
  return c.length + n.length + v.length;
}

/**
 * A TCP listener on every host address (IPv4 and IPv6) that counts who connected: what an
 * attack row must leave untouched.
 */
export async function hostListener(): Promise<{ port: number; hits: string[]; close(): Promise<void> }> {
  const hits: string[] = [];
  const server = createServer((sock) => {
    hits.push(sock.remoteAddress ?? "?");
    sock.destroy();
  });
  await new Promise<void>((resolve) => server.listen({ port: 0, host: "::", ipv6Only: false }, resolve));
  return {
    port: (server.address() as { port: number }).port,
    hits,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
