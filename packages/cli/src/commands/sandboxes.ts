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
  summary: "destroy a sandbox now (answered once it is unreachable; --wait: once it is gone)",
  args: "PROJECT/ENV [--wait]",
  flags: {
    wait: { type: "boolean", description: "return once its host removed it, not once it is unreachable" },
  },
  remote: true,
  async run(ctx) {
    const [ref = ""] = ctx.args(1, 1, "PROJECT/ENV");
    const env = ctx.environment(ref);
    const r = await ctx.client().deleteSandbox(env, { wait: ctx.bool("wait") });
    ctx.print(
      { deleted: env, status: r.status, deployment: r.deployment },
      r.status === "destroyed"
        ? `sandbox ${env} destroyed`
        : `sandbox ${env} is being destroyed (deployment ${r.deployment}); it takes no more commands`,
    );
    return 0;
  },
};

export const sandboxes: GroupSpec = {
  name: "sandboxes",
  summary: "create, list and destroy sandboxes (one environment per episode)",
  subcommands: [create, list, rm],
};
