import { VerifyResponse } from "@denv/spec";
import type { CommandSpec } from "../command.js";
import { CliError } from "../exit-codes.js";
import { fields } from "../format.js";
import { follow, outcome } from "../progress.js";

export const verify: CommandSpec = {
  name: "verify",
  summary: "grade an environment with its verifier, on a fork, and print the reward",
  args: "PROJECT/ENV [--verbose]",
  description: `
Runs the verify deployment: the agent's processes are stopped, the episode is snapshotted and
forked, the egress probe runs, and the verifier declared in x-denv grades the fork as its own
user. Prints the reward (--json: the VerifyResponse). Exits 0 when the episode was graded, 1
when the verifier refused or failed, or the deployment failed.`,
  flags: {
    verbose: { type: "boolean", short: "v", description: "show the deployment's log lines as they come" },
  },
  remote: true,
  async run(ctx) {
    const [ref = ""] = ctx.args(1, 1, "PROJECT/ENV");
    const env = ctx.environment(ref);
    const client = ctx.client();
    const done = await follow(ctx, client, await client.verify(env));
    if (done.status === "failed") throw new CliError(done.error?.code ?? "internal", outcome(done));
    const parsed = VerifyResponse.safeParse(done.result);
    if (!parsed.success) {
      throw new CliError(
        "invalid_response",
        `deployment ${done.id} finished without a verify result; see: denv deployments show ${done.id}`,
      );
    }
    const result = parsed.data;
    ctx.print(result, () =>
      [
        fields([
          ["reward", result.reward],
          ...Object.entries(result.rewards)
            .filter(([name]) => name !== "reward")
            .map(([name, value]): [string, number] => [`  ${name}`, value]),
          ["status", result.status],
          ["message", result.message],
          ["version", result.version],
          ["fork", result.fork],
        ]),
        ...(result.log === "" ? [] : ["", "verifier log:", result.log.trimEnd()]),
      ].join("\n"),
    );
    return result.status === "graded" ? 0 : 1;
  },
};
