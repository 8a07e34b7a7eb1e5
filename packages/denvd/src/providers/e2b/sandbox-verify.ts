import type { SandboxOps } from "../sandbox-grade.js";
import { PROVIDER } from "./check-plan.js";
import { type E2bSandbox, loadE2b } from "./e2b-sdk.js";
import { execInSandbox } from "./sandbox-exec.js";
import { putSandboxFiles, readSandboxArchive } from "./sandbox-files.js";
import { asRoot } from "./sandbox-processes.js";
import { readPasswd } from "./sandbox-user.js";

/**
 * Protection 2 in E2B sandboxes. They share no network, so a verifier that reaches the fork's
 * services runs in the fork's sandbox, as its own uid, after the agent's processes were killed in
 * the episode's sandbox (before the snapshot): the tests and the reward directory are that uid's
 * alone (mode 0700), the submission is copied through the special-file check into /submission
 * (root's, readable), and the fork's services keep running as they did in the episode. What this
 * does not give, and denvd's own runtime does: an image of the verifier's own, a kernel and /tmp
 * not shared with the services. A verifier that reads only files gets all of that: a sandbox of
 * its own from its own template, where the same steps place the submission and the tests
 * (sandbox-grade.ts grades; this says how it reaches an E2B sandbox).
 */
export function e2bOps(sbx: E2bSandbox): SandboxOps {
  return {
    provider: PROVIDER,
    passwd: () => readPasswd(sbx),
    asRoot: (script, env) => asRoot(sbx, script, env),
    readArchive: (user, path) => readSandboxArchive(sbx, user, path),
    putFiles: (user, dir, archive) => putSandboxFiles(sbx, user, dir, archive),
    exec: (user, cwd, o) => execInSandbox(sbx, user, cwd, o),
    readText: async (user, path) => {
      const { FileNotFoundError } = await loadE2b();
      try {
        return await sbx.files.read(path, { user: user.name });
      } catch (e) {
        if (e instanceof FileNotFoundError) return undefined;
        throw e;
      }
    },
  };
}
