import type { CommandSpec, GroupSpec } from "../command.js";
import { fields, table, when } from "../format.js";

const TARGET_FLAG = {
  target: { type: "string", value: "TARGET", description: "the target of the tokens (default local)" },
} as const;

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
      uses,
      ttl_sec: ttl,
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

const list: CommandSpec = {
  name: "join-token list",
  summary: "list a target's join tokens, revoked ones included (admin)",
  args: "[--target TARGET]",
  flags: TARGET_FLAG,
  remote: true,
  async run(ctx) {
    ctx.args(0, 0, "");
    const target = ctx.string("target") ?? "local";
    const tokens = await ctx.client().listJoinTokens(target);
    ctx.print({ join_tokens: tokens }, () =>
      table(
        ["ID", "TARGET", "USES LEFT", "EXPIRES", "REVOKED", "CREATED"],
        tokens.map((t) => [
          t.id,
          t.target,
          t.uses_left,
          when(t.expires_at),
          when(t.revoked_at),
          when(t.created_at),
        ]),
        `no join tokens for target ${target}; create one with: denv join-token create --target ${target}`,
      ),
    );
    return 0;
  },
};

const revoke: CommandSpec = {
  name: "join-token revoke",
  summary: "revoke a join token: no more hosts join with it (admin)",
  args: "ID [--target TARGET]",
  description: `
Revokes the join token ID of TARGET (default local); hosts that joined with it keep their
credentials (remove one with: denv hosts rm HOST).`,
  flags: TARGET_FLAG,
  remote: true,
  async run(ctx) {
    const [id = ""] = ctx.args(1, 1, "ID");
    const target = ctx.string("target") ?? "local";
    await ctx.client().revokeJoinToken(target, id);
    ctx.print(
      { revoked: id, target },
      `join token ${id} revoked: no more hosts join target ${target} with it`,
    );
    return 0;
  },
};

export const joinToken: GroupSpec = {
  name: "join-token",
  summary: "create, list and revoke join tokens for hosts",
  subcommands: [create, list, revoke],
};
