import type { Pool } from "@denv/spec";
import type { CommandSpec, GroupSpec } from "../command.js";
import { table } from "../format.js";

/** Warm fork pools: forks of a project's current version kept ready for sandboxes. */

function poolText(p: Pool): string {
  return [
    `pool ${p.project}: size ${p.size} (${p.source}), ${p.ready} ready, ${p.filling} filling`,
    p.version ? `version: ${p.version}` : "version: none yet (deploy first)",
  ].join("\n");
}

const ls: CommandSpec = {
  name: "pools list",
  summary: "list the projects' warm fork pools",
  args: "",
  remote: true,
  async run(ctx) {
    ctx.args(0, 0, "");
    const pools = await ctx.client().listPools();
    ctx.print({ pools }, () =>
      table(
        ["PROJECT", "VERSION", "SIZE", "SOURCE", "READY", "FILLING"],
        pools.map((p) => [
          p.project,
          p.version,
          String(p.size),
          p.source,
          String(p.ready),
          String(p.filling),
        ]),
        "no pools; 'denv pools set PROJECT SIZE' or x-denv.pool in the compose file makes one",
      ),
    );
    return 0;
  },
};

const show: CommandSpec = {
  name: "pools show",
  summary: "show a project's warm fork pool",
  args: "[PROJECT]",
  remote: true,
  async run(ctx) {
    const [given] = ctx.args(0, 1, "PROJECT");
    const pool = await ctx.client().getPool(ctx.project(given));
    ctx.print(pool, () => poolText(pool));
    return 0;
  },
};

const set: CommandSpec = {
  name: "pools set",
  summary: "set how many warm forks a project's pool keeps (admin)",
  args: "PROJECT SIZE|file [--wait]",
  flags: {
    wait: { type: "boolean", description: "wait until the pool holds SIZE ready forks (at most 10 minutes)" },
  },
  description: `SIZE forks of the project's current version are kept started, healthy and probed, and a
sandbox claims one instead of forking cold. 'file' drops this size: the compose file's
x-denv.pool applies again. 0 empties the pool.`,
  remote: true,
  async run(ctx) {
    const [project = "", size = ""] = ctx.args(2, 2, "PROJECT SIZE|file");
    if (size !== "file" && !/^\d+$/.test(size))
      throw ctx.usage(`SIZE is a whole number or 'file', not '${size}'`);
    const client = ctx.client();
    let pool = await client.setPool(project, size === "file" ? null : Number(size));
    const until = Date.now() + 600_000;
    while (ctx.bool("wait") && (pool.ready !== pool.size || pool.filling > 0)) {
      if (Date.now() > until)
        throw new Error(`pool ${project} holds ${pool.ready} of ${pool.size} ready forks after 10 minutes`);
      await new Promise((r) => setTimeout(r, 250));
      pool = await client.getPool(project);
    }
    ctx.print(pool, () => poolText(pool));
    return 0;
  },
};

export const pools: GroupSpec = {
  name: "pools",
  summary: "list and size warm fork pools",
  subcommands: [ls, show, set],
};
