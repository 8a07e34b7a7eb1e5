import { DenvError, type HostEnvironment, type HostVerifyResult, labelsFor, type Version } from "@denv/spec";
import type { VerifyOptions } from "../../runtime/verify-environment.js";
import { verifyOnFork } from "../fork-verify.js";
import { readTextAs, type SandboxOps } from "../sandbox-grade.js";
import { killAllBut } from "../sandbox-procs.js";
import { deleteSandbox } from "./prime-cleanup.js";
import { execInPrime } from "./prime-exec.js";
import { putPrimeFiles, readPrimeArchive } from "./prime-files.js";
import { MAX_TIMEOUT_MINUTES, PROVIDER, type PrimeHost, primeName, provider } from "./prime-host.js";
import { primeLabels } from "./prime-materialize.js";
import { joinVerifier } from "./prime-network.js";
import type { PrimeEnvironmentRecord } from "./prime-records.js";
import { asRoot } from "./prime-shell.js";

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
 * Protection 2 on Prime (fork-verify.ts): the agent's processes killed in the episode's agent
 * sandbox (all but its baseline, as root inside it), a checkpoint of every sandbox, a fork (new
 * sandboxes restored from them, their services started anew, probed), and the verifier run as its
 * own uid, the tests and the reward directory that uid's alone, the submission copied through the
 * special-file check: in the fork's agent sandbox when it is of the agent service's image, else in
 * a sandbox of its own image joined to the fork's private network (verifierSandbox). A verifier
 * that reads only files (services: false) is refused at deploy.
 */
export async function verifyOnPrime(
  episode: PrimeEpisode,
  envId: string,
  opts: VerifyOptions = {},
): Promise<HostVerifyResult> {
  const { host } = episode;
  const ownImage = (await episode.environment(envId)).verifierImage !== undefined;
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
      ownVerifierSandbox: () => ownImage,
      verifierSandbox: async (forkId, command) => {
        const rec = await episode.environment(forkId);
        if (!rec.verifierImage || !rec.networkId) {
          throw new DenvError("invalid_request", `environment ${forkId} has no verifier image of its own`);
        }
        // gc leaves the sandbox alone while the verify's command runs: no record owns it.
        const marker = `${command}-verifier`;
        host.inFlight.add(marker);
        try {
          const sandboxId = await verifierSandbox(host, rec, command);
          return {
            ops: primeOps(host, sandboxId),
            sandboxId,
            image: rec.verifierImage,
            from: `the verifier's image, a member of the fork's private network ${rec.networkId}`,
            release: () => deleteSandbox(host, sandboxId).finally(() => host.inFlight.delete(marker)),
          };
        } catch (err) {
          host.inFlight.delete(marker);
          throw err;
        }
      },
    },
    envId,
    opts,
  );
}

/**
 * A sandbox of the verifier's image for a fork, labelled as the verify's (gc and settle find it
 * by them), its egress shut as the services' are, joined to the fork's network so that it reaches
 * the services by their names (prime-network.ts). A failure deletes it.
 */
async function verifierSandbox(
  host: PrimeHost,
  rec: PrimeEnvironmentRecord,
  command: string,
): Promise<string> {
  const sb = await provider(() =>
    host.api.createSandbox({
      name: primeName(rec.project, rec.name, "verifier"),
      dockerImage: rec.verifierImage as string,
      labels: primeLabels(
        labelsFor({
          host: host.hostId,
          project: rec.project,
          environment: rec.id,
          role: "verifier",
          command: `${command}-verifier`,
        }),
      ),
      networkAccess: false,
      timeoutMinutes: host.timeoutMinutes ?? MAX_TIMEOUT_MINUTES,
      idempotencyKey: `${command}-verifier`,
    }),
  );
  try {
    await provider(() => host.api.waitRunning(sb.id));
    const services = new Map([[rec.plan.agent.service, rec.sandboxId]]);
    for (const [service, peer] of Object.entries(rec.peers ?? {})) services.set(service, peer.sandboxId);
    await joinVerifier(host, rec.networkId as string, sb.id, rec.plan, services);
    return sb.id;
  } catch (err) {
    await deleteSandbox(host, sb.id).catch((e: unknown) =>
      host.log(`could not delete ${sb.id}: ${String(e)}`),
    );
    throw err;
  }
}
