import { existsSync, mkdirSync, readdirSync, writeFileSync } from "node:fs";
import path from "node:path";
import { DenvApiError, type DenvClient } from "@denv/sdk";
import { parseVersionRef, type Version } from "@denv/spec";
import type { CommandSpec, GroupSpec } from "../command.js";
import { CliError } from "../exit-codes.js";
import { exportHarborTask } from "../export-harbor-task.js";
import { fields } from "../format.js";
import { isDir } from "../harbor-task.js";

/**
 * `denv export openenv PROJECT@vN DIR`: an OpenEnv environment directory whose client forks
 * that version on denv (python/src/denv/openenv, DenvProvider). It holds the manifest
 * (openenv.yaml), a Python client module and a README; no credentials (the client reads the
 * same configuration as the CLI: DENV_URL, DENV_TOKEN, the config file).
 */

/** The agent service of the environment the version came from, else of PROJECT/alpha. */
async function agentService(client: DenvClient, version: Version): Promise<string | undefined> {
  for (const env of [version.source_environment, `${version.project}/alpha`]) {
    try {
      const agent = (await client.getEnvironment(env)).agent?.service;
      if (agent !== undefined && agent in version.digests) return agent;
    } catch (err) {
      if (!(err instanceof DenvApiError && err.status === 404)) throw err;
    }
  }
  const services = Object.keys(version.digests);
  return services.length === 1 ? services[0] : undefined;
}

const pyString = (s: string) => JSON.stringify(s);

export function manifest(o: {
  name: string;
  version: string;
  service: string;
  port: number;
  app: string;
}): string {
  return `# OpenEnv manifest of ${o.version}, which runs on denv (written by 'denv export openenv').
# 'app' is the server module inside the version's image; client.py forks the version per
# episode with denv.openenv.DenvProvider and reaches ${o.service}:${o.port} through a tunnel.
spec_version: 1
name: ${o.name}
type: space
runtime: fastapi
app: ${o.app}
port: ${o.port}
description: ${JSON.stringify(`${o.version} on denv`)}
denv:
  version: ${o.version}
  service: ${o.service}
  port: ${o.port}
`;
}

export function clientModule(o: { version: string; service: string; port: number }): string {
  return `"""OpenEnv client of ${o.version}, which runs on denv (written by \`denv export openenv\`).

Each client forks the version into its own denv sandbox (\`denv.openenv.DenvProvider\`) and talks
to the OpenEnv server at ${o.service}:${o.port} inside it through a local tunnel; closing the client
destroys the sandbox. The control plane and token come from the denv configuration (DENV_URL,
DENV_TOKEN, ~/.config/denv/config.json) or from keyword arguments.

    import asyncio, client

    async def main():
        env = await client.connect()
        try:
            result = await env.reset()
            result = await env.step({...})
        finally:
            await env.close()

    asyncio.run(main())
"""

from __future__ import annotations

from typing import Any

from openenv.core.generic_client import GenericEnvClient

from denv.openenv import DenvProvider

VERSION = ${pyString(o.version)}
SERVICE = ${pyString(o.service)}
PORT = ${o.port}


def provider(**kwargs: Any) -> DenvProvider:
    """A DenvProvider for this version (kwargs: client, url, token, ttl_sec, ...)."""
    return DenvProvider(service=SERVICE, server_port=PORT, **kwargs)


async def connect(**kwargs: Any) -> GenericEnvClient:
    """Forks the version and returns a connected OpenEnv client (\`.sync()\` for blocking use)."""
    return await GenericEnvClient.from_docker_image(VERSION, provider=provider(**kwargs))
`;
}

function readme(o: { version: string; service: string; port: number }): string {
  return `# ${o.version} as an OpenEnv environment

Written by \`denv export openenv\`. The environment runs on denv: \`client.connect()\` forks
${o.version} into a sandbox with \`denv.openenv.DenvProvider\`, tunnels a local port to
\`${o.service}:${o.port}\` and returns openenv-core's \`GenericEnvClient\`, connected. Needs
\`pip install -e 'python[openenv]'\` (in a denv checkout) and a denv configuration (\`denv login\`, or DENV_URL and
DENV_TOKEN).

- \`openenv.yaml\`: the OpenEnv manifest, with a \`denv\` block naming the version.
- \`client.py\`: \`connect()\`, \`provider()\`, \`VERSION\`, \`SERVICE\`, \`PORT\`.
`;
}

const openenv: CommandSpec = {
  name: "export openenv",
  summary: "write an OpenEnv environment directory whose client forks a version on denv",
  args: "PROJECT@vN DIR [--service S] [--port N] [--app MODULE:APP] [--name NAME]",
  description: `
Writes DIR/openenv.yaml (the OpenEnv manifest, with a denv block naming the version, service and
port), DIR/client.py (connect() forks the version with denv.openenv.DenvProvider and returns
openenv-core's GenericEnvClient, connected) and DIR/README.md. DIR must be missing or empty. The
files hold no URL or token: the client reads the denv configuration.`,
  flags: {
    service: {
      type: "string",
      value: "S",
      description: "the service the OpenEnv server runs in (default: the agent service)",
    },
    port: { type: "string", value: "N", description: "the port it listens on (default 8000)" },
    app: {
      type: "string",
      value: "MODULE:APP",
      description: "the manifest's app: the server module in the image (default server.app:app)",
    },
    name: { type: "string", value: "NAME", description: "the manifest's name (default: the project)" },
  },
  remote: true,
  async run(ctx) {
    const [ref = "", dir = ""] = ctx.args(2, 2, "PROJECT@vN and DIR");
    try {
      parseVersionRef(ref);
    } catch (err) {
      throw ctx.usage((err as Error).message);
    }
    const port = ctx.int("port", 1) ?? 8000;
    if (port > 65535) throw ctx.usage(`--port must be a port number, not '${port}'`);
    const app = ctx.string("app") ?? "server.app:app";
    if (!/^[A-Za-z_][\w.]*:[A-Za-z_]\w*$/.test(app)) throw ctx.usage(`'${app}' is not MODULE:APP`);
    const out = path.resolve(ctx.io.cwd, dir);
    if (existsSync(out) && readdirSync(out).length > 0) {
      throw new CliError("conflict", `${dir} is not empty: export into a new or empty directory`);
    }
    const client = ctx.client();
    const version = await client.getVersion(ref);
    const services = Object.keys(version.digests);
    const service = ctx.string("service") ?? (await agentService(client, version));
    if (service === undefined) {
      throw new CliError(
        "invalid_request",
        `cannot tell which service of ${version.id} runs the OpenEnv server: pass --service (${services.join(", ")})`,
      );
    }
    if (services.length > 0 && !services.includes(service)) {
      throw new CliError(
        "not_found",
        `${version.id} has no service '${service}' (it has ${services.join(", ")})`,
      );
    }
    const name = ctx.string("name") ?? version.project;
    const o = { name, version: version.id, service, port, app };
    mkdirSync(out, { recursive: true });
    const files = { "openenv.yaml": manifest(o), "client.py": clientModule(o), "README.md": readme(o) };
    for (const [file, text] of Object.entries(files)) writeFileSync(path.join(out, file), text);
    ctx.print({ directory: out, version: version.id, service, port, files: Object.keys(files) }, () =>
      fields([
        ["directory", out],
        ["version", version.id],
        ["server", `${service}:${port}`],
        ["files", Object.keys(files).join(" ")],
      ]),
    );
    return 0;
  },
};

/**
 * `denv export harbor PROJECT@vN DIR --source FOLDER`: a Harbor task folder that Harbor's own
 * docker backend runs. The control plane keeps images and digests, not the compose source, so
 * the task is written from the local project folder the version was deployed from.
 */
const harbor: CommandSpec = {
  name: "export harbor",
  summary: "write a Harbor task folder from a version and its project folder",
  args: "PROJECT@vN DIR --source FOLDER",
  description: `
Writes DIR (missing or empty) as a Harbor task: environment/ (the agent service's build context with
its Dockerfile as environment/Dockerfile, or FROM its image), task.toml (FOLDER/task.toml, else one
with the verifier's timeout and the agent's workdir), instruction.md (FOLDER/instruction.md),
tests/ (x-denv.verifier.tests, with a test.sh that runs the verifier's command in main unless the
tests have one) and solution/ when FOLDER has one. The control plane keeps no compose source, so
FOLDER is the project folder the version was deployed from; the version is checked to exist. With
more services, environment/docker-compose.yaml holds them for Harbor to merge over its own: the
agent's service as main (also reachable under its denv name), the others as they are, their build
contexts under environment/. A service key Harbor cannot take (env_file, ...) is refused.`,
  flags: {
    source: {
      type: "string",
      value: "FOLDER",
      description: "the project folder the version was deployed from (required)",
    },
  },
  remote: true,
  async run(ctx) {
    const [ref = "", dir = ""] = ctx.args(2, 2, "PROJECT@vN and DIR");
    try {
      parseVersionRef(ref);
    } catch (err) {
      throw ctx.usage((err as Error).message);
    }
    const sourceArg = ctx.string("source");
    if (sourceArg === undefined)
      throw ctx.usage("--source FOLDER is required: the control plane keeps no compose source");
    const source = path.resolve(ctx.io.cwd, sourceArg);
    if (!isDir(source)) throw ctx.usage(`${sourceArg} is not a folder`);
    const version = await ctx.client().getVersion(ref);
    const out = path.resolve(ctx.io.cwd, dir);
    const r = exportHarborTask(source, out, version.id, { source: sourceArg.replace(/\/+$/, ""), out: dir });
    ctx.print(r, () =>
      fields([
        ["directory", r.directory],
        ["version", r.version],
        ["main", r.service],
        ["files", r.files.join(" ")],
      ]),
    );
    return 0;
  },
};

export const exportCmd: GroupSpec = {
  name: "export",
  summary: "export a version for another framework",
  subcommands: [openenv, harbor],
};
