import { parseVersionRef } from "@denv/spec";
import type { CommandSpec, GroupSpec } from "../command.js";
import type { Context } from "../context.js";
import { fields, table, when } from "../format.js";

const MiB = 1024 * 1024;
const size = (bytes: number) => `${(bytes / MiB).toFixed(1)} MiB`;

function versionArg(ctx: Context): string {
  const [ref = ""] = ctx.args(1, 1, "PROJECT@vN");
  try {
    parseVersionRef(ref);
  } catch (err) {
    throw ctx.usage((err as Error).message);
  }
  return ref;
}

const list: CommandSpec = {
  name: "versions list",
  summary: "list a project's versions",
  args: "[PROJECT]",
  remote: true,
  async run(ctx) {
    const [given] = ctx.args(0, 1, "PROJECT");
    const versions = await ctx.client().listVersions(ctx.project(given));
    ctx.print({ versions }, () =>
      table(
        ["ID", "FROM", "PARENT", "METHOD", "LAYERS", "VOLUMES", "HOSTS", "CREATED"],
        versions.map((v) => [
          v.id,
          v.source_environment,
          v.parent_version,
          v.method,
          size(v.sizes.layer_bytes),
          size(v.sizes.volume_bytes),
          // Every host that holds it, the one it was taken on first.
          (v.replicas?.length ? v.replicas : [v.host_id]).join(","),
          when(v.created_at),
        ]),
        "no versions; a deploy or 'denv env snapshot' makes one",
      ),
    );
    return 0;
  },
};

const show: CommandSpec = {
  name: "versions show",
  summary: "show a version: digests, volume snapshots, sizes, timings",
  args: "PROJECT@vN",
  remote: true,
  async run(ctx) {
    const v = await ctx.client().getVersion(versionArg(ctx));
    ctx.print(v, () =>
      fields([
        ["id", v.id],
        ["from", v.source_environment],
        ["parent", v.parent_version],
        ["host", v.host_id],
        ["method", v.method],
        ["sizes", `layers ${size(v.sizes.layer_bytes)}, volumes ${size(v.sizes.volume_bytes)}`],
        [
          "digests",
          Object.entries(v.digests)
            .map(([s, d]) => `${s}=${d}`)
            .join(" "),
        ],
        [
          "volumes",
          Object.entries(v.volumes)
            .map(([n, s]) => `${n}=${s.snapshot}`)
            .join(" "),
        ],
        [
          "timings",
          Object.entries(v.timings)
            .map(([n, ms]) => `${n}=${ms}ms`)
            .join(" "),
        ],
        ["created", when(v.created_at)],
      ]),
    );
    return 0;
  },
};

const rm: CommandSpec = {
  name: "versions rm",
  summary: "delete a version no environment runs from",
  args: "PROJECT@vN",
  remote: true,
  async run(ctx) {
    const id = versionArg(ctx);
    await ctx.client().deleteVersion(id);
    ctx.print({ deleted: id }, `version ${id} deleted`);
    return 0;
  },
};

export const versions: GroupSpec = {
  name: "versions",
  summary: "list, show and delete versions",
  subcommands: [list, show, rm],
};
