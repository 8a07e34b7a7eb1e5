import { DenvError } from "@denv/spec";
import { SYSTEM_PATH } from "../e2b/sandbox-user.js";
import type { AsRoot } from "../sandbox-procs.js";
import { PROVIDER, type PrimeHost, provider } from "./prime-host.js";

/** A shell script in the sandbox as `user`, from /: its stdout, whatever its exit. */
export function runAs(host: PrimeHost, sandboxId: string, user: string): (script: string) => Promise<string> {
  return async (script) =>
    (
      await provider(() => host.api.runCommand(sandboxId, ["/bin/sh", "-c", script], { user, cwd: "/" }))
    ).stdout.toString("utf8");
}

/**
 * A script run as root inside the sandbox with SYSTEM_PATH (none of it the agent's to write): its
 * stdout; a failure is a `docker` error with its stderr.
 */
export function asRoot(host: PrimeHost, sandboxId: string): AsRoot {
  return async (script, env) => {
    const r = await provider(() =>
      host.api.runCommand(sandboxId, ["/bin/sh", "-c", `export PATH=${SYSTEM_PATH}; ${script}`], {
        user: "root",
        cwd: "/",
        ...(env ? { env } : {}),
      }),
    );
    if (r.exitCode !== 0)
      throw new DenvError("docker", `${PROVIDER}: ${r.stderr.toString().trim() || `exit ${r.exitCode}`}`);
    return r.stdout.toString("utf8");
  };
}
