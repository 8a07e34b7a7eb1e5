import { TargetKind } from "@denv/spec";
import type { CommandSpec, GroupSpec } from "../command.js";
import { table, when } from "../format.js";

const list: CommandSpec = {
  name: "targets list",
  summary: "list the targets environments can run on",
  args: "",
  remote: true,
  async run(ctx) {
    ctx.args(0, 0, "");
    const targets = await ctx.client().listTargets();
    ctx.print({ targets }, () =>
      table(
        ["NAME", "KIND", "CAPABILITIES", "CREATED"],
        targets.map((t) => [
          t.name,
          t.kind,
          Object.entries(t.capabilities)
            .filter(([, on]) => on)
            .map(([name]) => name)
            .join(","),
          when(t.created_at),
        ]),
        "no targets",
      ),
    );
    return 0;
  },
};

const create: CommandSpec = {
  name: "targets create",
  summary: "create a target (admin)",
  args: "NAME [--kind KIND]",
  flags: {
    kind: { type: "string", value: "KIND", description: `${TargetKind.options.join(", ")} (default hosts)` },
  },
  remote: true,
  async run(ctx) {
    const [name = ""] = ctx.args(1, 1, "NAME");
    const kind = ctx.string("kind") ?? "hosts";
    const parsed = TargetKind.safeParse(kind);
    if (!parsed.success) throw ctx.usage(`--kind is one of ${TargetKind.options.join(", ")}, not '${kind}'`);
    const target = await ctx.client().createTarget({ name, kind: parsed.data });
    ctx.print(
      target,
      `target ${target.name} created (${target.kind}); join hosts with: denv join-token create --target ${target.name}`,
    );
    return 0;
  },
};

export const targets: GroupSpec = {
  name: "targets",
  summary: "list and create targets",
  subcommands: [list, create],
};
