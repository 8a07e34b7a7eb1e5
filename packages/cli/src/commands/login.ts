import { saveClientConfig } from "@denv/sdk";
import type { CommandSpec } from "../command.js";
import { CliError } from "../exit-codes.js";

/** `denv login --url URL --token TOKEN`: checks the pair with /v1/whoami, then saves it. */
export const login: CommandSpec = {
  name: "login",
  summary: "check a control plane URL and token, and save them in the config file",
  args: "--url URL --token TOKEN",
  description: `
Asks the control plane who the token belongs to (GET /v1/whoami) and, when it answers, writes
the URL and the token (and --project, when given) to the config file, mode 0600. The values
may also come from DENV_URL and DENV_TOKEN; nothing is saved when the check fails.`,
  remote: true,
  async run(ctx) {
    ctx.args(0, 0, "");
    const config = ctx.config();
    const fromUser = (key: "url" | "token") =>
      config.sources[key] === "flag" || config.sources[key] === "env";
    if (!fromUser("url") || !fromUser("token")) {
      throw ctx.usage("login needs --url and --token (or DENV_URL and DENV_TOKEN)");
    }
    const client = ctx.client();
    const who = await client.whoami();
    if (
      ctx.string("project") !== undefined &&
      who.project !== undefined &&
      who.project !== ctx.string("project")
    ) {
      throw new CliError(
        "forbidden",
        `this token is limited to project '${who.project}', not '${ctx.string("project")}'`,
      );
    }
    const path = saveClientConfig(
      {
        url: client.url,
        token: config.token,
        project: ctx.string("project"),
      },
      { env: ctx.io.env },
    );
    ctx.print(
      { url: client.url, whoami: who, config_path: path },
      `logged in to ${client.url} as ${who.name} (${who.role}${who.project === undefined ? "" : `, project ${who.project}`})\nsaved to ${path}`,
    );
    return 0;
  },
};
