import type { CommandSpec } from "../command.js";

export const logs: CommandSpec = {
  name: "logs",
  summary: "print the logs of an environment's services",
  args: "PROJECT/ENV [--service S] [--tail N]",
  description: `
Prints what a service wrote (the agent service's unless --service names another): its stdout on
stdout and its stderr on stderr, the last 200 lines of each unless --tail says otherwise.`,
  flags: {
    service: {
      type: "string",
      short: "s",
      value: "S",
      description: "this service (default: the agent service)",
    },
    tail: { type: "string", short: "n", value: "N", description: "only the last N lines" },
  },
  remote: true,
  async run(ctx) {
    const [ref = ""] = ctx.args(1, 1, "PROJECT/ENV");
    const env = ctx.environment(ref);
    const tail = ctx.int("tail", 1);
    const service = ctx.string("service");
    const out = await ctx.client().logs(env, {
      service,
      tail,
    });
    if (ctx.json) ctx.print(out, "");
    else {
      ctx.io.stdout(out.stdout);
      ctx.io.stderr(out.stderr);
    }
    return 0;
  },
};
