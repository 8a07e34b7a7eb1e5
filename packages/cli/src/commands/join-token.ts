import type { CommandSpec, GroupSpec } from "../command.js";
import { fields, when } from "../format.js";

const create: CommandSpec = {
  name: "join-token create",
  summary: "create a token a host joins a target with (admin)",
  args: "[--target TARGET] [--uses N] [--ttl SEC]",
  description: `
Creates a join token for TARGET (default local). The token is printed once; on the host, run
  denvd join --url URL --token TOKEN`,
  flags: {
    target: { type: "string", value: "TARGET", description: "the target the host joins (default local)" },
    uses: { type: "string", value: "N", description: "how many hosts may join with it (default 1)" },
    ttl: { type: "string", value: "SEC", description: "seconds until it expires (default 3600)" },
  },
  remote: true,
  async run(ctx) {
    ctx.args(0, 0, "");
    const uses = ctx.int("uses", 1);
    const ttl = ctx.int("ttl", 1);
    const client = ctx.client();
    const token = await client.createJoinToken(ctx.string("target") ?? "local", {
      ...(uses === undefined ? {} : { uses }),
      ...(ttl === undefined ? {} : { ttl_sec: ttl }),
    });
    ctx.print(token, () =>
      [
        fields([
          ["token", token.token],
          ["target", token.target],
          ["uses", token.uses_left],
          ["expires", when(token.expires_at)],
        ]),
        "",
        `on the host: denvd join --url ${client.url} --token ${token.token ?? "TOKEN"}`,
      ].join("\n"),
    );
    return 0;
  },
};

export const joinToken: GroupSpec = {
  name: "join-token",
  summary: "create join tokens for hosts",
  subcommands: [create],
};
