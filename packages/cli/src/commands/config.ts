import { CONFIG_KEYS, type ConfigKey, saveClientConfig } from "@denv/sdk";
import { checkName } from "@denv/spec";
import type { CommandSpec, GroupSpec } from "../command.js";
import type { Context } from "../context.js";
import { CliError } from "../exit-codes.js";

const KEYS = CONFIG_KEYS.join(", ");

function key(ctx: Context, text: string | undefined): ConfigKey {
  if (text === undefined) throw ctx.usage(`missing KEY (one of ${KEYS})`);
  if (!(CONFIG_KEYS as readonly string[]).includes(text))
    throw ctx.usage(`unknown key '${text}' (one of ${KEYS})`);
  return text as ConfigKey;
}

const get: CommandSpec = {
  name: "config get",
  summary: "print the value denv uses for a key, after flags and environment variables",
  args: "KEY",
  description: `
Prints the value of KEY (url, token or project) that commands use: --url/--token/--project
win over DENV_URL/DENV_TOKEN/DENV_PROJECT, which win over the config file. Exits 1 when no
source sets it. --json adds where the value came from (flag, env or file) and the file.`,
  remote: true,
  async run(ctx) {
    const [name] = ctx.args(1, 1, `KEY (one of ${KEYS})`);
    const k = key(ctx, name);
    const config = ctx.config();
    const value = config[k];
    if (value === undefined) {
      throw new CliError(
        "not_found",
        `'${k}' is not set (no flag, no ${envName(k)}, nothing in ${config.path})`,
      );
    }
    ctx.print({ key: k, value, source: config.sources[k], path: config.path }, value);
    return 0;
  },
};

const set: CommandSpec = {
  name: "config set",
  summary: "write a key to the config file",
  args: "KEY VALUE",
  description: `Writes KEY (url, token or project) to the config file (mode 0600).`,
  remote: false,
  async run(ctx) {
    const [name, value = ""] = ctx.args(2, 2, "KEY and VALUE");
    const k = key(ctx, name);
    if (k === "url" && !/^https?:\/\/[^/]/.test(value)) throw ctx.usage(`'${value}' is not an http(s) URL`);
    if (k === "project") {
      try {
        checkName("project", value);
      } catch (err) {
        throw ctx.usage((err as Error).message);
      }
    }
    const path = saveClientConfig({ [k]: value }, { env: ctx.io.env });
    ctx.print({ key: k, value, path }, `${k} saved to ${path}`);
    return 0;
  },
};

const unset: CommandSpec = {
  name: "config unset",
  summary: "remove a key from the config file",
  args: "KEY",
  remote: false,
  async run(ctx) {
    const [name] = ctx.args(1, 1, `KEY (one of ${KEYS})`);
    const k = key(ctx, name);
    const path = saveClientConfig({ [k]: undefined }, { env: ctx.io.env });
    ctx.print({ key: k, path }, `${k} removed from ${path}`);
    return 0;
  },
};

const envName = (k: ConfigKey) => `DENV_${k.toUpperCase()}`;

export const config: GroupSpec = {
  name: "config",
  summary: "read and write the client configuration (url, token, project)",
  description: `
The configuration lives in ~/.config/denv/config.json ($XDG_CONFIG_HOME/denv/config.json, or
the file DENV_CONFIG names), shared with the Python package.`,
  subcommands: [get, set, unset],
};
