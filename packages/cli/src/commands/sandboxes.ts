import type { CommandSpec, GroupSpec } from "../command.js";
import { table, when } from "../format.js";
import { environmentText } from "./env.js";

const create: CommandSpec = {
  name: "sandboxes create",
  summary: "create a sandbox: a ready fork of a version, destroyed after its TTL",
  args: "[PROJECT] [--version V] [--name NAME] [--ttl SEC]",
  flags: {
    version: {
      type: "string",
      value: "V",
      description: "the version to fork (PROJECT@vN or N; default: the current one)",
    },
    name: {
      type: "string",
      value: "NAME",
      description: "the sandbox environment's name (default: chosen by the control plane)",
    },
    ttl: { type: "string", value: "SEC", description: "seconds until it is destroyed (default 3600)" },
  },
  remote: true,
  async run(ctx) {
    const [given] = ctx.args(0, 1, "PROJECT");
    const project = ctx.project(given);
    const ttl = ctx.int("ttl", 1);
    const version = ctx.string("version");
    const name = ctx.string("name");
    const sandbox = await ctx.client().createSandbox({
      project,
      ...(version === undefined
        ? {}
        : { version: /^v?\d+$/.test(version) ? `${project}@v${version.replace(/^v/, "")}` : version }),
      name,
      ttl_sec: ttl,
    });
    ctx.print(sandbox, () => `${environmentText(sandbox)}${sandbox.pool ? `\npool: ${sandbox.pool}` : ""}`);
    return 0;
  },
};

const list: CommandSpec = {
  name: "sandboxes list",
  summary: "list sandboxes",
  args: "",
  remote: true,
  async run(ctx) {
    ctx.args(0, 0, "");
    const sandboxes = await ctx.client().listSandboxes();
    ctx.print({ sandboxes }, () =>
      table(
        ["ID", "STATUS", "VERSION", "EXPIRES", "CREATED"],
        sandboxes.map((s) => [
          s.id,
          s.status,
          s.parent_version ?? s.version,
          when(s.expires_at),
          when(s.created_at),
        ]),
        "no sandboxes",
      ),
    );
    return 0;
  },
};

const rm: CommandSpec = {
  name: "sandboxes rm",
  summary: "destroy a sandbox now",
  args: "PROJECT/ENV",
  remote: true,
  async run(ctx) {
    const [ref = ""] = ctx.args(1, 1, "PROJECT/ENV");
    const env = ctx.environment(ref);
    await ctx.client().deleteSandbox(env);
    ctx.print({ deleted: env }, `sandbox ${env} destroyed`);
    return 0;
  },
};

export const sandboxes: GroupSpec = {
  name: "sandboxes",
  summary: "create, list and destroy sandboxes (one environment per episode)",
  subcommands: [create, list, rm],
};
