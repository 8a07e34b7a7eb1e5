import { readFileSync, statSync } from "node:fs";
import path from "node:path";
import { createGzip } from "node:zlib";
import { packTar } from "@denv/sdk";
import { NAME_PATTERN, validateCompose } from "@denv/spec";
import type { CommandSpec } from "../command.js";
import { composeContextFor, findComposeFile } from "../compose-files.js";
import { CliError } from "../exit-codes.js";
import { uploadFilter } from "../ignore.js";
import { countingStream, formatBytes } from "../live-line.js";
import { DEPLOYMENT_FLAGS, dashboardUrl, runDeployment } from "../progress.js";

/** `denv deploy [DIR]`: uploads the project folder (or names a git ref) and follows the phases. */
export const deploy: CommandSpec = {
  name: "deploy",
  summary: "deploy a project folder (or a git ref) to an environment and follow its phases",
  args: "[DIR] [--project PROJECT] [--env ENV] [--target TARGET] [--ref GIT_REF] [--placement K=V]... [--no-wait] [--verbose]",
  description: `
Packs DIR (default: the current folder) as a gzip-compressed tar and streams it to the control
plane, which streams it to the host that builds it; then shows each phase as it runs on stderr
and prints the deployment. .git and node_modules are left out, and so is what the root
.dockerignore excludes (the compose file, .env, Dockerfiles and .dockerignore files always go).
With --ref, nothing is uploaded: a project created with --repo (or connected with
denv projects connect-github) deploys that git ref, which the host that builds fetches itself.

The host is one of the target's (--target, default local) carrying the placement labels: the x-denv.placement labels of
DIR's compose file, with --placement K=V over them (see docs/reference/targets.md#placement).

The project is --project, else DENV_PROJECT, else the config file's project, else DIR's name.
Exits 1 when the deployment fails (the environment stays on its previous version).`,
  flags: {
    env: { type: "string", value: "ENV", description: "the environment to deploy (default alpha)" },
    ref: {
      type: "string",
      value: "GIT_REF",
      description: "deploy this git ref of the project's repository instead of a folder",
    },
    target: {
      type: "string",
      value: "TARGET",
      description: "the target whose hosts may take it (default local; see denv targets ls)",
    },
    placement: {
      type: "string",
      value: "K=V",
      multiple: true,
      description: "a placement label the host must carry, over x-denv.placement (repeatable)",
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
    const target = ctx.string("target");
    const placement: Record<string, string> = ref === undefined ? filePlacement(dir, ctx.io.env) : {};
    for (const kv of ctx.strings("placement")) {
      const [k, v] = kv.split(/=(.*)/s, 2);
      if (!k || v === undefined || /[,\s]/.test(k) || v.includes(","))
        throw ctx.usage(`--placement takes K=V (no commas), not '${kv}'`);
      placement[k] = v;
    }
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
          return await client.deploy(project, { gitRef: ref }, { environment, placement, target });
        }
        ctx.progress(`uploading ${dir} to ${project}/${environment}`);
        const skipped: string[] = [];
        const live = ctx.live();
        let sent = 0;
        const tar = packTar(dir, {
          name: ".",
          filter: uploadFilter(dir),
          onSkip: (rel) => skipped.push(rel),
        })
          .pipe(createGzip())
          .pipe(
            countingStream((total) => {
              sent = total;
              live.update(`uploading ${formatBytes(total)}`);
            }),
          );
        const started = await client.deploy(project, { tar }, { environment, placement, target });
        live.clear();
        if (live.enabled) ctx.progress(`uploaded ${formatBytes(sent)}`);
        for (const rel of skipped) ctx.progress(`  left out ${rel}: not a file, folder or symlink`);
        return started;
      },
      (d) => [
        ...(typeof (d.result as { version?: unknown } | undefined)?.version === "string"
          ? [`version ${(d.result as { version: string }).version}`]
          : []),
        // A command a person can run and a page a browser opens, not a JSON route that needs a bearer token.
        `show denv deployments show ${d.id}`,
        `open ${dashboardUrl(ctx.client().url, d.id)}`,
      ],
    );
  },
};

function projectFor(configured: string | undefined, dir: string): string | undefined {
  if (configured !== undefined) return configured;
  const base = path.basename(dir);
  return NAME_PATTERN.test(base) ? base : undefined;
}

/**
 * The x-denv.placement labels of DIR's compose file, so that the first deploy lands on a fitting
 * host (the control plane sees the plan only once a host validated it). A file that does not
 * validate here sends none: the host's validation reports it.
 */
function filePlacement(dir: string, env: NodeJS.ProcessEnv): Record<string, string> {
  const file = findComposeFile(dir);
  if (file === undefined) return {};
  const abs = path.join(dir, file);
  const context = composeContextFor(abs, file, env);
  if (!context.ok) return {};
  const result = validateCompose(readFileSync(abs, "utf8"), context.ctx);
  return result.ok ? { ...result.plan.placement } : {};
}
