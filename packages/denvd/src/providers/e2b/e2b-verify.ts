import type { HostEnvironment, HostVerifyResult, Version } from "@denv/spec";
import type { VerifyOptions } from "../../runtime/verify-environment.js";
import { type ForkSandbox, verifyOnFork } from "../fork-verify.js";
import type { E2bEnvironmentRecord } from "./e2b-records.js";
import type { E2bSandbox } from "./e2b-sdk.js";
import { stopAgentProcesses } from "./sandbox-processes.js";
import { e2bOps } from "./sandbox-verify.js";

/** What the E2B verify needs of its runtime: the steps of an episode. */
export interface E2bEpisode {
  environment(envId: string): Promise<{ rec: E2bEnvironmentRecord; sbx: E2bSandbox }>;
  snapshot(envId: string, opts: { command: string; number?: number | undefined }): Promise<Version>;
  version(versionId: string): Promise<Version>;
  fork(versionId: string, opts: { name: string; command: string }): Promise<HostEnvironment>;
  destroy(envId: string): Promise<void>;
  /**
   * A sandbox of the verifier's own template for a fork (x-denv.verifier.services: false), without
   * internet access; `release` kills it.
   */
  verifierSandbox(
    forkId: string,
    command: string,
  ): Promise<{ sbx: E2bSandbox; template: string; release(): Promise<void> }>;
}

/**
 * Protection 2 on E2B (fork-verify.ts): the agent's processes killed in the episode's sandbox, an
 * E2B snapshot of it, a fork (a new sandbox from the snapshot, probed as every sandbox is), and
 * the verifier run in the fork's sandbox as its own uid, or, when it reads only files, in a
 * sandbox of its own template (sandbox-verify.ts says what each isolates and what not).
 */
export async function verifyOnE2b(
  episode: E2bEpisode,
  envId: string,
  opts: VerifyOptions = {},
): Promise<HostVerifyResult> {
  const environment = async (id: string): Promise<ForkSandbox> => {
    const { rec, sbx } = await episode.environment(id);
    return {
      rec,
      image: rec.templateId,
      ops: e2bOps(sbx),
      stopAgent: () => stopAgentProcesses(sbx, rec.baseline),
    };
  };
  return verifyOnFork(
    {
      name: "e2b",
      environment,
      snapshot: (id, o) => episode.snapshot(id, o),
      version: (id) => episode.version(id),
      fork: (id, o) => episode.fork(id, o),
      destroy: (id) => episode.destroy(id),
      verifierSandbox: async (forkId, command) => {
        const own = await episode.verifierSandbox(forkId, command);
        return {
          ops: e2bOps(own.sbx),
          sandboxId: own.sbx.sandboxId,
          image: own.template,
          from: "the verifier's template",
          release: () => own.release(),
        };
      },
    },
    envId,
    opts,
  );
}
