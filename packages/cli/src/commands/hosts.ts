import type { CommandSpec, GroupSpec } from "../command.js";
import { table, when } from "../format.js";

const GiB = 1024 ** 3;

const list: CommandSpec = {
  name: "hosts list",
  summary: "list the hosts (denvd) joined to targets, online or not",
  args: "",
  description: `
Lists every host for an admin token; for any other token, the hosts its projects' environments
run on.`,
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
          h.draining ? `${h.status}, draining` : h.status,
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

const drain: CommandSpec = {
  name: "hosts drain",
  summary: "stop placing environments on a host; what it runs stays (admin)",
  args: "HOST",
  description: `
Drains HOST: deploys, forks and sandboxes go to the target's other hosts from now on. Its
environments keep running and answering; a version whose snapshot lives on it can no longer be
forked. Remove it once it is empty with: denv hosts rm HOST`,
  remote: true,
  async run(ctx) {
    const [id = ""] = ctx.args(1, 1, "HOST");
    const host = await ctx.client().drainHost(id);
    ctx.print(
      host,
      `host ${host.id} is draining: no new environments go there; it still runs ${host.environments}`,
    );
    return 0;
  },
};

const rm: CommandSpec = {
  name: "hosts rm",
  summary: "remove a host and revoke its credential (admin)",
  args: "HOST [--force]",
  description: `
Removes HOST and revokes its credential: its denvd is disconnected now and cannot reconnect.
Refused while the host holds environments, unless --force: they are then marked failed (destroy
them to forget them). Versions whose snapshots lived on the host are forgotten.`,
  flags: {
    force: {
      type: "boolean",
      description: "remove it even though it holds environments (they are marked failed)",
    },
  },
  remote: true,
  async run(ctx) {
    const [id = ""] = ctx.args(1, 1, "HOST");
    const removed = await ctx.client().removeHost(id, { force: ctx.bool("force") });
    const lost = [
      removed.environments.length > 0 ? `failed: ${removed.environments.join(", ")}` : "",
      removed.versions.length > 0 ? `versions forgotten: ${removed.versions.join(", ")}` : "",
      removed.replicas_dropped.length > 0
        ? `versions still held elsewhere: ${removed.replicas_dropped.join(", ")}`
        : "",
    ].filter(Boolean);
    ctx.print(removed, [`host ${removed.id} removed; its credential is revoked`, ...lost].join("\n"));
    return 0;
  },
};

export const hosts: GroupSpec = {
  name: "hosts",
  summary: "list, drain and remove hosts",
  subcommands: [list, drain, rm],
};
