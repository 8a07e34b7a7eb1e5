import { statSync } from "node:fs";
import path from "node:path";
import { createGzip } from "node:zlib";
import { packTar } from "@denv/sdk";
import { NAME_PATTERN } from "@denv/spec";
import type { CommandSpec } from "../command.js";
import { CliError } from "../exit-codes.js";
import { uploadFilter } from "../ignore.js";
import { DEPLOYMENT_FLAGS, runDeployment } from "../progress.js";

/** `denv deploy [DIR]`: uploads the project folder (or names a git ref) and follows the phases. */
export const deploy: CommandSpec = {
  name: "deploy",
  summary: "deploy a project folder (or a git ref) to an environment and follow its phases",
  args: "[DIR] [--project PROJECT] [--env ENV] [--ref GIT_REF] [--no-wait] [--verbose]",
  description: `
Packs DIR (default: the current folder) as a gzip-compressed tar and streams it to the control
plane, which streams it to the host that builds it; then shows each phase as it runs on stderr
and prints the deployment. .git and node_modules are left out, and so is what the root
.dockerignore excludes (the compose file, .env, Dockerfiles and .dockerignore files always go).
With --ref, nothing is uploaded: a project created with --repo deploys that git ref.

The project is --project, else DENV_PROJECT, else the config file's project, else DIR's name.
Exits 1 when the deployment fails (the environment stays on its previous version).`,
  flags: {
    env: { type: "string", value: "ENV", description: "the environment to deploy (default alpha)" },
    ref: {
      type: "string",
      value: "GIT_REF",
      description: "deploy this git ref of the project's repository instead of a folder",
    },
    ...DEPLOYMENT_FLAGS,
  },
  remote: true,
  async run(ctx) {
    const [dirArg] = ctx.args(0, 1, "DIR");
    const ref = ctx.string("ref");
    if (ref !== undefined && dirArg !== undefined) throw ctx.usage("give DIR or --ref, not both");
    const dir = path.resolve(ctx.io.cwd, dirArg ?? ".");
    const project = projectFor(ctx.config().project, dir);
    if (project === undefined) {
      throw ctx.usage(`'${path.basename(dir)}' is not a project name; pass --project PROJECT`);
    }
    const environment = ctx.string("env") ?? "alpha";
    if (ref === undefined) {
      const stat = statSync(dir, { throwIfNoEntry: false });
      if (stat === undefined || !stat.isDirectory())
        throw new CliError("not_found", `${dir} is not a folder`);
    }
    return await runDeployment(
      ctx,
      async (client) => {
        if (ref !== undefined) {
          ctx.progress(`deploying ${project}@${ref} to ${project}/${environment}`);
          return await client.deploy(project, { gitRef: ref }, { environment });
        }
        ctx.progress(`uploading ${dir} to ${project}/${environment}`);
        const skipped: string[] = [];
        const tar = packTar(dir, {
          name: ".",
          filter: uploadFilter(dir),
          onSkip: (rel) => skipped.push(rel),
        }).pipe(createGzip());
        const started = await client.deploy(project, { tar }, { environment });
        for (const rel of skipped) ctx.progress(`  left out ${rel}: not a file, folder or symlink`);
        return started;
      },
      (d) => [
        ...(typeof (d.result as { version?: unknown } | undefined)?.version === "string"
          ? [`version ${(d.result as { version: string }).version}`]
          : []),
        `url ${ctx.client().url}/v1/deployments/${d.id}`,
      ],
    );
  },
};

function projectFor(configured: string | undefined, dir: string): string | undefined {
  if (configured !== undefined) return configured;
  const base = path.basename(dir);
  return NAME_PATTERN.test(base) ? base : undefined;
}
