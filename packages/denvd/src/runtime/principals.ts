import { posix } from "node:path";
import { DenvError, isRootUser, numericId, Protection, parseUser } from "@denv/spec";
import tar from "tar-stream";
import { isProtected } from "../container-spec.js";
import type { DockerClient } from "../docker/docker-client.js";
import type { EnvironmentRecord } from "../records.js";

/**
 * Who a command runs as. One resolution of a `user[:group]` spelling, the engine's own (numbers
 * in any spelling, names through the container's passwd read with the engine's archive API, so
 * that links resolve inside the container, never on the host), used by exec, files and verify.
 */

/** Where a command of an environment runs: the container and the user, after protection 1. */
export interface Principal {
  service: string;
  containerId: string;
  isAgent: boolean;
  /** undefined: the container's own user (a non-agent service with no user asked). */
  user: string | undefined;
}

/**
 * The service (default: the agent service) and user (default there: the agent user) of a
 * command; root on the agent service of an rl-environment is refused (protection 1).
 */
export async function principalFor(
  docker: DockerClient,
  rec: EnvironmentRecord,
  ask: { service?: string | undefined; user?: string | undefined },
): Promise<Principal> {
  const service = ask.service ?? rec.plan.agent.service;
  const containerId = rec.containers[service];
  if (!containerId) {
    throw new DenvError(
      "not_found",
      `environment ${rec.id} has no service '${service}' (services: ${Object.keys(rec.containers).join(", ")})`,
    );
  }
  const isAgent = service === rec.plan.agent.service;
  const user = ask.user ?? (isAgent ? rec.plan.agent.user : undefined);
  // A sandboxed agent may be root: root there is gVisor's, not the host's (protection 1).
  if (
    isAgent &&
    isProtected(rec.plan) &&
    rec.plan.agent.sandbox === undefined &&
    user !== undefined &&
    (await resolvesToRoot(docker, containerId, user))
  ) {
    throw new DenvError("agent_root", Protection.agentRoot(service));
  }
  return { service, containerId, isAgent, user };
}

/** root, uid 0 in any spelling, or a name the container's passwd maps to uid 0. */
export async function resolvesToRoot(
  docker: DockerClient,
  containerId: string,
  user: string,
): Promise<boolean> {
  if (isRootUser(user)) return true;
  return (await resolveUid(docker, containerId, user)) === 0;
}

/** The uid the engine would run `user` as; undefined for a name the container's passwd lacks. */
export async function resolveUid(
  docker: DockerClient,
  containerId: string,
  user: string,
): Promise<number | undefined> {
  const spec = parseUser(user);
  if (spec.uid !== undefined) return spec.uid;
  const passwd = await readContainerFile(docker, containerId, "/etc/passwd");
  for (const line of (passwd ?? Buffer.alloc(0)).toString("utf8").split("\n")) {
    const [name, , uid] = line.split(":");
    if (name === spec.user && uid !== undefined) return numericId(uid);
  }
  return undefined;
}

/** Symlink hops followed inside the container before a path is given up on. */
const MAX_LINKS = 8;

/**
 * A regular file of a container, read through the engine's archive API (the engine resolves the
 * path in the container's root); symlinks are followed the same way. undefined when missing.
 */
export async function readContainerFile(
  docker: DockerClient,
  containerId: string,
  path: string,
): Promise<Buffer | undefined> {
  let current = path;
  for (let hop = 0; hop <= MAX_LINKS; hop++) {
    let archive: NodeJS.ReadableStream;
    try {
      archive = await docker.containers.getArchive(containerId, current);
    } catch (err) {
      if (err instanceof DenvError && err.code === "not_found") return undefined;
      throw err;
    }
    const entry = await firstEntry(archive);
    if (entry?.type === "symlink" && entry.linkname) {
      current = posix.resolve(posix.dirname(current), entry.linkname);
      continue;
    }
    return entry?.type === "file" ? entry.body : undefined;
  }
  return undefined;
}

async function firstEntry(
  archive: NodeJS.ReadableStream,
): Promise<{ type: string; linkname: string | undefined; body: Buffer } | undefined> {
  const extract = tar.extract();
  let first: { type: string; linkname: string | undefined; body: Buffer } | undefined;
  extract.on("entry", (header, stream, next) => {
    const chunks: Buffer[] = [];
    stream.on("data", (b: unknown) => {
      if (first === undefined) chunks.push(b as Buffer);
    });
    stream.on("end", () => {
      first ??= {
        type: header.type ?? "file",
        linkname: header.linkname ?? undefined,
        body: Buffer.concat(chunks),
      };
      next();
    });
    stream.resume();
  });
  archive.pipe(extract);
  await new Promise<void>((resolve, reject) => {
    extract.on("finish", () => resolve());
    extract.on("error", reject);
  });
  return first;
}

/** The uid and gid a file owned by `user` gets (the user's passwd group unless a group is given). */
export async function resolveIds(
  docker: DockerClient,
  containerId: string,
  user: string,
): Promise<{ uid: number; gid: number }> {
  const spec = parseUser(user);
  const passwd = (await readContainerFile(docker, containerId, "/etc/passwd"))?.toString("utf8") ?? "";
  const entry = passwd
    .split("\n")
    .map((line) => line.split(":"))
    .find(([name, , uid]) =>
      spec.uid !== undefined ? numericId(uid ?? "") === spec.uid : name === spec.user,
    );
  const uid = spec.uid ?? numericId(entry?.[2] ?? "");
  if (uid === undefined) {
    throw new DenvError(
      "invalid_compose",
      `user '${spec.user}' is not in the container's /etc/passwd: give a uid`,
    );
  }
  let gid = entry ? numericId(entry[3] ?? "") : uid;
  if (spec.group !== undefined && spec.group !== "") {
    gid = numericId(spec.group);
    if (gid === undefined) {
      const groups = (await readContainerFile(docker, containerId, "/etc/group"))?.toString("utf8") ?? "";
      const line = groups.split("\n").find((l) => l.split(":")[0] === spec.group);
      gid = numericId(line?.split(":")[2] ?? "");
    }
    if (gid === undefined) {
      throw new DenvError(
        "invalid_compose",
        `group '${spec.group}' is not in the container's /etc/group: give a gid`,
      );
    }
  }
  return { uid, gid: gid ?? uid };
}
