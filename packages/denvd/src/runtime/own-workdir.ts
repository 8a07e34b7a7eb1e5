import { posix } from "node:path";
import { Readable } from "node:stream";
import { DenvError } from "@denv/spec";
import tar from "tar-stream";
import type { DockerClient } from "../docker/docker-client.js";
import { packEntries } from "../files/tar-pack.js";
import type { EnvironmentRecord } from "../records.js";
import { resolveIds } from "./principals.js";

/**
 * Protection 1: the agent user owns its workdir (set once at deploy, before the services start;
 * forks inherit it). Done through the engine's archive API only, which resolves every path in the
 * container's own root: no binary of the image runs, and nothing runs on the host.
 *
 * A missing workdir is created (parents as root, 0755, like `mkdir -p`); an existing one is read
 * out and put back with every entry owned by the agent user (like `chown -R -h`, which also
 * clears setuid and setgid bits).
 */
export async function ownWorkdir(docker: DockerClient, rec: EnvironmentRecord): Promise<void> {
  const { service, user, workdir } = rec.plan.agent;
  const containerId = rec.containers[service] as string;
  const fail = (why: string) =>
    new DenvError(
      "docker",
      `cannot give ${workdir} to the agent user ${user} in service '${service}': ${why}`,
    );
  const { uid, gid } = await resolveIds(docker, containerId, user);
  const dir = posix.normalize(workdir);
  if (!dir.startsWith("/") || dir === "/") throw fail("the workdir must be an absolute path below /");

  if (!(await docker.containers.statPath(containerId, dir))) {
    let parent = posix.dirname(dir);
    const missing = [posix.basename(dir)];
    while (parent !== "/" && !(await docker.containers.statPath(containerId, parent))) {
      missing.unshift(posix.basename(parent));
      parent = posix.dirname(parent);
    }
    const entries = missing.map((_, i) => ({
      name: missing.slice(0, i + 1).join("/"),
      type: "directory" as const,
      mode: 0o755,
      // Parents as root, like mkdir -p; the workdir itself for the agent.
      uid: i === missing.length - 1 ? uid : 0,
      gid: i === missing.length - 1 ? gid : 0,
    }));
    await docker.containers
      .putArchive(containerId, parent, await packEntries(entries))
      .catch((err: Error) => {
        throw fail(err.message);
      });
    return;
  }

  const archive = await docker.containers.getArchive(containerId, dir);
  const extract = tar.extract();
  const pack = tar.pack();
  extract.on("entry", (header, stream, next) => {
    const mode = header.type === "file" ? (header.mode ?? 0o644) & ~0o6000 : header.mode;
    stream.pipe(pack.entry({ ...header, mode, uid, gid, uname: "", gname: "" }, next));
  });
  extract.on("finish", () => pack.finalize());
  extract.on("error", (err: Error) => pack.destroy(err));
  archive.pipe(extract);
  await docker.containers
    .putArchive(containerId, posix.dirname(dir), Readable.from(pack))
    .catch((err: Error) => {
      throw fail(err.message);
    });
}
