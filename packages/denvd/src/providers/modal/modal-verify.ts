import type { HostEnvironment, HostVerifyResult, Version } from "@denv/spec";
import type { Sandbox } from "modal";
import type { VerifyOptions } from "../../runtime/verify-environment.js";
import type { SandboxUser } from "../e2b/sandbox-user.js";
import { verifyOnFork } from "../fork-verify.js";
import { readTextAs, type SandboxOps } from "../sandbox-grade.js";
import { killAllBut } from "../sandbox-procs.js";
import { execInModal, type ModalUser, modalUser } from "./modal-exec.js";
import { putModalFiles, readModalArchive } from "./modal-files.js";
import { type ModalBridge, modal, PROVIDER } from "./modal-host.js";
import { asRoot } from "./modal-materialize.js";
import type { ModalEnvironmentRecord } from "./modal-records.js";

/** What the Modal verify needs of its runtime: the steps of an episode. */
export interface ModalEpisode {
  host: ModalBridge;
  environment(envId: string): Promise<ModalEnvironmentRecord>;
  snapshot(envId: string, opts: { command: string; number?: number | undefined }): Promise<Version>;
  version(versionId: string): Promise<Version>;
  fork(versionId: string, opts: { name: string; command: string }): Promise<HostEnvironment>;
  destroy(envId: string): Promise<void>;
}

/**
 * How the grade reaches a Modal sandbox: everything runs inside it through Modal's API, each
 * command as its user through setpriv started by the sandbox's root (modal-exec.ts), the passwd
 * read by Modal's own file tool, nothing of the image's on this host. A user is resolved again
 * through the sandbox's passwd for its gid and home.
 */
export function modalOps(sb: Sandbox): SandboxOps {
  const passwd = () => modal(() => sb.filesystem.readText("/etc/passwd"));
  const as = async (user: SandboxUser): Promise<ModalUser> => modalUser(await passwd(), user.name);
  return {
    provider: PROVIDER,
    passwd,
    asRoot: asRoot(sb),
    readArchive: async (user, path) => readModalArchive(sb, await as(user), path),
    putFiles: async (user, dir, archive) => putModalFiles(sb, await as(user), dir, archive),
    exec: async (user, cwd, o) => modal(async () => execInModal(sb, await as(user), cwd, o)),
    readText: async (user, path) => {
      const as_ = await as(user);
      return readTextAs((cmd) => execInModal(sb, as_, "/", { cmd }), PROVIDER, path);
    },
  };
}

/**
 * Protection 2 on Modal (fork-verify.ts): the agent's processes killed in the episode's sandbox
 * (all but its baseline, as the sandbox's root), a filesystem snapshot of it, a fork (a new
 * sandbox of the snapshot, its service started anew and probed), and the verifier run in the
 * fork's sandbox as its own uid, the tests and the reward directory that uid's alone, the
 * submission copied through the special-file check. A verifier that reads only files
 * (services: false) is refused at deploy: Modal gives it no sandbox of its own here.
 */
export async function verifyOnModal(
  episode: ModalEpisode,
  envId: string,
  opts: VerifyOptions = {},
): Promise<HostVerifyResult> {
  const { host } = episode;
  return verifyOnFork(
    {
      name: "modal",
      environment: async (id) => {
        const rec = await episode.environment(id);
        const sb = await host.sandbox(rec.sandboxId);
        return {
          rec: { ...rec, agentUid: rec.agentUser.uid },
          image: rec.imageId,
          ops: modalOps(sb),
          stopAgent: () => killAllBut(asRoot(sb), rec.baseline, PROVIDER),
        };
      },
      snapshot: (id, o) => episode.snapshot(id, o),
      version: (id) => episode.version(id),
      fork: (id, o) => episode.fork(id, o),
      destroy: (id) => episode.destroy(id),
    },
    envId,
    opts,
  );
}
