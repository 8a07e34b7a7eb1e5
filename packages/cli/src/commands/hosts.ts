import type { CommandSpec, GroupSpec } from "../command.js";
import { table, when } from "../format.js";

const GiB = 1024 ** 3;

const list: CommandSpec = {
  name: "hosts list",
  summary: "list the hosts (denvd) joined to targets, online or not",
  args: "",
  remote: true,
  async run(ctx) {
    ctx.args(0, 0, "");
    const hosts = await ctx.client().listHosts();
    ctx.print({ hosts }, () =>
      table(
        ["ID", "TARGET", "STATUS", "VERSION", "ENVIRONMENTS", "CPUS", "MEMORY", "LAST SEEN"],
        hosts.map((h) => [
          h.id,
          h.target,
          h.status,
          h.version,
          h.environments,
          h.capacity?.cpus,
          h.capacity === undefined ? undefined : `${(h.capacity.memory_bytes / GiB).toFixed(1)} GiB`,
          when(h.last_seen_at),
        ]),
        "no hosts; join one with a token from: denv join-token create --target local",
      ),
    );
    return 0;
  },
};

export const hosts: GroupSpec = {
  name: "hosts",
  summary: "list hosts",
  subcommands: [list],
};
