import { parseArgs } from "node:util";
import type { Context, Values } from "./context.js";
import { UsageError } from "./exit-codes.js";
import type { Io } from "./io.js";

/**
 * How a command is declared: its flags, usage and help come from one object, so that `--help`,
 * the parser and docs/reference/cli.md (checked by a test) cannot disagree.
 */

export interface FlagSpec {
  type: "string" | "boolean";
  short?: string;
  multiple?: boolean;
  /** The value's placeholder in help (`--env ENV`). */
  value?: string;
  description: string;
}

export interface CommandSpec {
  /** The words after `denv`: "deploy", "env fork". */
  name: string;
  summary: string;
  /** Arguments after the name, as the usage line shows them. */
  args: string;
  /** Paragraphs shown under the usage line. */
  description?: string;
  flags?: Record<string, FlagSpec>;
  /** Talks to the control plane: takes --url, --token and --project. */
  remote: boolean;
  /** Exit code of denv's own failures (default 1); of bad usage (default 2). `denv exec` uses 125 for both. */
  failureCode?: number;
  usageCode?: number;
  /** Splits raw arguments before parsing (exec: everything after the command's first word is the command). */
  split?: (args: string[]) => { head: string[]; rest: string[] };
  run(ctx: Context): Promise<number>;
}

export interface GroupSpec {
  name: string;
  summary: string;
  description?: string;
  subcommands: CommandSpec[];
}

/** A command with its own parser and help (`denv validate`, which predates this table). */
export interface RawSpec {
  name: string;
  summary: string;
  raw: (args: string[], io: Io) => number | Promise<number>;
}

export type Entry = CommandSpec | GroupSpec | RawSpec;

const GLOBAL_FLAGS: Record<string, FlagSpec> = {
  url: {
    type: "string",
    value: "URL",
    description: "the control plane's URL (overrides DENV_URL and the config file)",
  },
  token: {
    type: "string",
    value: "TOKEN",
    description: "the API token (overrides DENV_TOKEN and the config file)",
  },
  project: {
    type: "string",
    value: "PROJECT",
    description: "the project of commands that take one (overrides DENV_PROJECT and the config file)",
  },
};

export const COMMON_FLAGS: Record<string, FlagSpec> = {
  json: {
    type: "boolean",
    description: "print exactly one JSON object on stdout (progress stays on stderr)",
  },
  help: { type: "boolean", short: "h", description: "show this help" },
};

export const usageLine = (spec: CommandSpec) =>
  `usage: denv ${spec.name}${spec.args === "" ? "" : ` ${spec.args}`}`;

export function allFlags(spec: CommandSpec): Record<string, FlagSpec> {
  return { ...spec.flags, ...(spec.remote ? GLOBAL_FLAGS : {}), ...COMMON_FLAGS };
}

/** Parses a command's arguments; bad flags become a UsageError naming the flag. */
export function parseCommandArgs(
  spec: CommandSpec,
  args: string[],
): { values: Values; positionals: string[] } {
  const options: Record<string, { type: "string" | "boolean"; short?: string; multiple?: boolean }> = {};
  for (const [name, flag] of Object.entries(allFlags(spec))) {
    options[name] = {
      type: flag.type,
      // parseArgs refuses a `short` key that is present but undefined.
      ...(flag.short === undefined ? {} : { short: flag.short }),
      ...(flag.multiple === true ? { multiple: true } : {}),
    };
  }
  try {
    const parsed = parseArgs({ args, options, allowPositionals: true, strict: true });
    return { values: parsed.values as Values, positionals: parsed.positionals };
  } catch (err) {
    // node:util parseArgs throws TypeErrors with an ERR_PARSE_ARGS_* code for bad flags.
    const code = (err as NodeJS.ErrnoException).code ?? "";
    if (!code.startsWith("ERR_PARSE_ARGS")) throw err;
    const flag = /'([^']+)'/.exec((err as Error).message)?.[1];
    const message =
      code === "ERR_PARSE_ARGS_UNKNOWN_OPTION" && flag !== undefined
        ? `unknown flag '${flag}'`
        : code === "ERR_PARSE_ARGS_INVALID_OPTION_VALUE" && flag !== undefined
          ? `flag '${flag.split(" ")[0]}' ${/argument missing/.test((err as Error).message) ? "needs a value" : "takes no value"}`
          : (err as Error).message;
    throw new UsageError(message, usageLine(spec));
  }
}

function flagRows(flags: Record<string, FlagSpec>): string[] {
  const rows = Object.entries(flags).map(([name, flag]) => {
    const short = flag.short === undefined ? "" : `-${flag.short}, `;
    const value = flag.value === undefined ? "" : ` ${flag.value}`;
    return [`${short}--${name}${value}${flag.multiple === true ? "..." : ""}`, flag.description] as const;
  });
  const width = Math.max(...rows.map(([left]) => left.length)) + 3;
  return rows.map(([left, right]) => `  ${left.padEnd(width)}${right}`);
}

export function commandHelp(spec: CommandSpec): string {
  const parts = [usageLine(spec), ""];
  if (spec.description !== undefined) parts.push(paragraphs(spec.description), "");
  else parts.push(`${spec.summary[0]?.toUpperCase() ?? ""}${spec.summary.slice(1)}.`, "");
  if (spec.flags !== undefined && Object.keys(spec.flags).length > 0)
    parts.push("flags:", ...flagRows(spec.flags), "");
  parts.push("global flags:", ...flagRows({ ...(spec.remote ? GLOBAL_FLAGS : {}), ...COMMON_FLAGS }), "");
  return `${parts.join("\n")}\n`.replace(/\n\n\n$/, "\n\n");
}

export function groupHelp(group: GroupSpec): string {
  const width = Math.max(...group.subcommands.map((c) => leafName(c).length)) + 3;
  return [
    `usage: denv ${group.name} <subcommand> [flags]`,
    "",
    ...(group.description === undefined ? [] : [paragraphs(group.description), ""]),
    "subcommands:",
    ...group.subcommands.map((c) => `  ${leafName(c).padEnd(width)}${c.summary}`),
    "",
    `Run 'denv ${group.name} <subcommand> --help' for its flags.`,
    "",
  ].join("\n");
}

export const leafName = (spec: CommandSpec) => spec.name.split(" ").at(-1) ?? spec.name;

/** A description without its surrounding blank lines; indented lines (examples) keep their indent. */
const paragraphs = (text: string) => text.replace(/^\s*\n/, "").trimEnd();
