import type { Environment, Version } from "@denv/spec";
import type { CommandSpec, GroupSpec } from "../command.js";
import type { Context } from "../context.js";
import { fields, table, when } from "../format.js";
import { DEPLOYMENT_FLAGS, runDeployment } from "../progress.js";

const ENV_ARG = "PROJECT/ENV";

const list: CommandSpec = {
  name: "env list",
  summary: "list a project's environments",
  args: "[PROJECT]",
  remote: true,
  async run(ctx) {
    const [given] = ctx.args(0, 1, "PROJECT");
    const environments = await ctx.client().listEnvironments(ctx.project(given));
    ctx.print({ environments }, () =>
      table(
        ["ID", "STATUS", "VERSION", "PARENT", "HOST", "CREATED"],
        environments.map((e) => [e.id, e.status, e.version, e.parent_version, e.host_id, when(e.created_at)]),
        "no environments; deploy one with: denv deploy",
      ),
    );
    return 0;
  },
};

const show: CommandSpec = {
  name: "env show",
  summary: "show an environment: status, version, services, agent",
  args: ENV_ARG,
  remote: true,
  async run(ctx) {
    const env = await ctx.client().getEnvironment(envArg(ctx));
    ctx.print(env, () => environmentText(env));
    return 0;
  },
};

export function environmentText(env: Environment): string {
  const head = fields([
    ["id", env.id],
    ["status", env.status],
    ["version", env.version],
    ["parent", env.parent_version],
    ["host", env.host_id],
    ["sandbox", env.sandbox ? `yes, expires ${when(env.expires_at) ?? "never"}` : undefined],
    [
      "agent",
      env.agent === undefined
        ? undefined
        : `service ${env.agent.service}, user ${env.agent.user}, workdir ${env.agent.workdir}`,
    ],
    ["created", when(env.created_at)],
  ]);
  const services = table(
    ["SERVICE", "IMAGE", "CONTAINER"],
    env.services.map((s) => [s.name, s.image, s.container_id.slice(0, 12)]),
    "no services",
  );
  return `${head}\n\n${services}`;
}

/** N or vN means a version of the environment's own project. */
function versionOf(env: string, version: string | undefined): string | undefined {
  if (version === undefined || !/^v?\d+$/.test(version)) return version;
  return `${env.split("/")[0]}@v${version.replace(/^v/, "")}`;
}

function envArg(ctx: Context): string {
  const [ref = ""] = ctx.args(1, 1, ENV_ARG);
  return ctx.environment(ref);
}

const fork: CommandSpec = {
  name: "env fork",
  summary: "fork a version into a new environment",
  args: `${ENV_ARG} [--version V] [--name NAME]`,
  description: `
Forks the version PROJECT/ENV runs (or --version) into a new environment of the project: its
services start fresh from the version's snapshot on a new internal network, and the egress
probe runs before it is ready.`,
  flags: {
    version: {
      type: "string",
      value: "V",
      description: "the version to fork (PROJECT@vN or N; default: the one ENV runs)",
    },
    name: {
      type: "string",
      value: "NAME",
      description: "the new environment's name (default: chosen by the control plane)",
    },
    ...DEPLOYMENT_FLAGS,
  },
  remote: true,
  async run(ctx) {
    const env = envArg(ctx);
    const version = versionOf(env, ctx.string("version"));
    const name = ctx.string("name");
    return await runDeployment(
      ctx,
      (client) =>
        client.fork(env, {
          version,
          name,
        }),
      (d) => {
        const fork = d.result as Partial<Environment> | undefined;
        return fork?.id === undefined
          ? []
          : [`environment ${fork.id} (from ${fork.parent_version ?? fork.version ?? "?"})`];
      },
    );
  },
};

const snapshot: CommandSpec = {
  name: "env snapshot",
  summary: "snapshot an environment into a new version",
  args: ENV_ARG,
  flags: { ...DEPLOYMENT_FLAGS },
  remote: true,
  async run(ctx) {
    const env = envArg(ctx);
    return await runDeployment(
      ctx,
      (client) => client.snapshot(env),
      (d) => {
        const v = d.result as Partial<Version> | undefined;
        return v?.id === undefined ? [] : [`version ${v.id} (${v.method ?? "?"})`];
      },
    );
  },
};

const rollback: CommandSpec = {
  name: "env rollback",
  summary: "switch an environment back to an older version",
  args: `${ENV_ARG} --version V`,
  flags: {
    version: { type: "string", value: "V", description: "the version to roll back to (PROJECT@vN or N)" },
    ...DEPLOYMENT_FLAGS,
  },
  remote: true,
  async run(ctx) {
    const env = envArg(ctx);
    const version = versionOf(env, ctx.string("version"));
    if (version === undefined) throw ctx.usage("missing --version");
    return await runDeployment(ctx, (client) => client.rollback(env, { version }));
  },
};

/** stop, start and destroy: a deployment with no arguments beyond the environment. */
function simple(verb: "stop" | "start" | "destroy", summary: string): CommandSpec {
  return {
    name: `env ${verb}`,
    summary,
    args: ENV_ARG,
    flags: { ...DEPLOYMENT_FLAGS },
    remote: true,
    async run(ctx) {
      const env = envArg(ctx);
      return await runDeployment(ctx, (client) => client[verb](env));
    },
  };
}

export const env: GroupSpec = {
  name: "env",
  summary: "list, show, fork, snapshot, roll back, stop, start and destroy environments",
  description: `
Environments are addressed as PROJECT/ENV (ENV defaults to alpha). Commands that change one
start a deployment, show its phases on stderr and wait for it (--no-wait returns at once).`,
  subcommands: [
    list,
    show,
    fork,
    snapshot,
    rollback,
    simple("stop", "stop an environment's services (its data stays)"),
    simple("start", "start a stopped environment"),
    simple("destroy", "destroy an environment and its data"),
  ],
};
