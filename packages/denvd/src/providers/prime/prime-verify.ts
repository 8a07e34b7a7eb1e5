import type { HostEnvironment, HostVerifyResult, Version } from "@denv/spec";
import type { VerifyOptions } from "../../runtime/verify-environment.js";
import { verifyOnFork } from "../fork-verify.js";
import { readTextAs, type SandboxOps } from "../sandbox-grade.js";
import { killAllBut } from "../sandbox-procs.js";
import { execInPrime } from "./prime-exec.js";
import { putPrimeFiles, readPrimeArchive } from "./prime-files.js";
import { PROVIDER, type PrimeHost, provider } from "./prime-host.js";
import { asRoot } from "./prime-materialize.js";
import type { PrimeEnvironmentRecord } from "./prime-records.js";

/** What the Prime verify needs of its runtime: the steps of an episode. */
export interface PrimeEpisode {
  host: PrimeHost;
  environment(envId: string): Promise<PrimeEnvironmentRecord>;
  snapshot(envId: string, opts: { command: string; number?: number | undefined }): Promise<Version>;
  version(versionId: string): Promise<Version>;
  fork(versionId: string, opts: { name: string; command: string }): Promise<HostEnvironment>;
  destroy(envId: string): Promise<void>;
}

/**
 * How the grade reaches a Prime sandbox: everything runs inside it through Prime's API (the
 * command session as the user asked, the file API for the passwd), nothing of the image's on
 * this host.
 */
export function primeOps(host: PrimeHost, sandboxId: string): SandboxOps {
  const { api } = host;
  return {
    provider: PROVIDER,
    passwd: async () => (await provider(() => api.downloadFile(sandboxId, "/etc/passwd"))).toString("utf8"),
    asRoot: asRoot(host, sandboxId),
    readArchive: (user, path) => provider(() => readPrimeArchive(api, sandboxId, user.name, path)),
    putFiles: (user, dir, archive) => provider(() => putPrimeFiles(api, sandboxId, user.name, dir, archive)),
    exec: (user, cwd, o) => provider(() => execInPrime(api, sandboxId, user.name, cwd, o)),
    readText: (user, path) =>
      readTextAs(
        (argv) => provider(() => api.runCommand(sandboxId, argv, { user: user.name, cwd: "/" })),
        PROVIDER,
        path,
      ),
  };
}

/**
 * Protection 2 on Prime (fork-verify.ts): the agent's processes killed in the episode's sandbox
 * (all but its baseline, as root inside it), a checkpoint of it, a fork (a new sandbox restored
 * from the checkpoint, its service started anew and probed), and the verifier run in the fork's
 * sandbox as its own uid, the tests and the reward directory that uid's alone, the submission
 * copied through the special-file check. A verifier that reads only files (services: false) is
 * refused at deploy: Prime gives it no sandbox of its own here.
 */
export async function verifyOnPrime(
  episode: PrimeEpisode,
  envId: string,
  opts: VerifyOptions = {},
): Promise<HostVerifyResult> {
  const { host } = episode;
  return verifyOnFork(
    {
      name: "prime",
      environment: async (id) => {
        const rec = await episode.environment(id);
        return {
          rec,
          image: rec.image,
          ops: primeOps(host, rec.sandboxId),
          stopAgent: () => killAllBut(asRoot(host, rec.sandboxId), rec.baseline, PROVIDER),
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
