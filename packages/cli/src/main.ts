#!/usr/bin/env node
import { ExitCodes } from "@denv/spec";
import {
  type CommandSpec,
  commandHelp,
  type Entry,
  type GroupSpec,
  groupHelp,
  leafName,
  parseCommandArgs,
  usageLine,
} from "./command.js";
import { COMMANDS, SECTIONS } from "./commands/index.js";
import { Context, describeError } from "./context.js";
import { UsageError } from "./exit-codes.js";
import { type Io, processIo } from "./io.js";
import { denvVersion } from "./version.js";

const width = Math.max(...COMMANDS.map((c) => c.name.length)) + 3;
/** `denv --help`, laid out as gh's: the commands in their parts, then the flags. */
const USAGE = `denv runs RL environments as whole systems: deploy, fork, exec, grade.

USAGE
  denv <command> [subcommand] [args] [flags]

${SECTIONS.map((s) => `${s.heading}\n${s.commands.map((c) => `  ${`${c.name}:`.padEnd(width)}${c.summary}`).join("\n")}\n`).join("\n")}
FLAGS
  -h, --help   show this help
  --version    print the version and the commit it was built from

LEARN MORE
  Every command takes --json (one JSON object on stdout) and --help.
  Run 'denv <command> --help' for a command's subcommands and flags.
  Every command and flag: docs/reference/cli.md.
`;

const isHelp = (arg: string | undefined) => arg === "--help" || arg === "-h" || arg === "help";

async function main(argv: string[], io: Io): Promise<number> {
  const [name, ...args] = argv;
  if (name === undefined || isHelp(name)) {
    (name === undefined ? io.stderr : io.stdout)(USAGE);
    return name === undefined ? ExitCodes.usage : ExitCodes.ok;
  }
  if (name === "--version") {
    io.stdout(`${denvVersion()}\n`);
    return ExitCodes.ok;
  }
  const entry = COMMANDS.find((c) => c.name === name);
  if (entry === undefined) return usageFailure(io, argv, `unknown command '${name}'`, USAGE, ExitCodes.usage);
  if ("raw" in entry) {
    try {
      return await entry.raw(args, io);
    } catch (err) {
      if (!(err instanceof UsageError)) throw err;
      return usageFailure(io, args, err.message, `${err.usage}\n`, ExitCodes.usage, entry);
    }
  }
  if ("subcommands" in entry) return await runGroup(entry, args, io);
  return await runCommand(entry, args, io);
}

async function runGroup(group: GroupSpec, args: string[], io: Io): Promise<number> {
  const [sub, ...rest] = args;
  if (sub === undefined || isHelp(sub)) {
    (sub === undefined ? io.stderr : io.stdout)(groupHelp(group));
    return sub === undefined ? ExitCodes.usage : ExitCodes.ok;
  }
  const spec = group.subcommands.find((c) => leafName(c) === sub);
  if (spec === undefined) {
    return usageFailure(
      io,
      args,
      `unknown subcommand '${group.name} ${sub}'`,
      groupHelp(group),
      ExitCodes.usage,
    );
  }
  return await runCommand(spec, rest, io);
}

async function runCommand(spec: CommandSpec, args: string[], io: Io): Promise<number> {
  const failureCode = spec.failureCode ?? ExitCodes.failure;
  const json = (spec.split?.(args).head ?? args).includes("--json");
  let ctx: Context | undefined;
  try {
    const { head, rest } = spec.split?.(args) ?? { head: args, rest: [] };
    const { values, positionals } = parseCommandArgs(spec, head);
    if (values.help === true) {
      io.stdout(commandHelp(spec));
      return ExitCodes.ok;
    }
    ctx = new Context(
      io,
      { name: spec.name, usage: usageLine(spec), failureCode: spec.failureCode },
      values,
      positionals,
      rest,
    );
    return await spec.run(ctx);
  } catch (err) {
    if (err instanceof UsageError) {
      return usageFailure(
        io,
        json ? ["--json"] : [],
        err.message,
        `${err.usage}\n`,
        spec.usageCode ?? ExitCodes.usage,
        spec,
      );
    }
    const described = describeError(err);
    if (described === undefined) {
      io.stderr(`denv ${spec.name}: internal error: ${(err as Error).stack ?? String(err)}\n`);
      if (json)
        io.stdout(`${JSON.stringify({ ok: false, error: { code: "internal", message: String(err) } })}\n`);
      return failureCode;
    }
    if (json) io.stdout(`${JSON.stringify({ ok: false, error: described })}\n`);
    else
      io.stderr(
        `denv ${spec.name}: ${described.message}\n${(described.details ?? []).map((d) => `  ${d}\n`).join("")}`,
      );
    return failureCode;
  }
}

/** Bad usage: the message and the usage on stderr (and one JSON object with --json). */
function usageFailure(
  io: Io,
  args: string[],
  message: string,
  usage: string,
  code: number,
  spec?: Entry,
): number {
  if (args.includes("--json")) {
    io.stdout(`${JSON.stringify({ ok: false, error: { code: "invalid_request", message } })}\n`);
  }
  const prefix = spec === undefined ? "denv" : `denv ${spec.name}`;
  const more = spec === undefined ? "" : `Run 'denv ${spec.name} --help' for more.\n`;
  io.stderr(`${prefix}: ${message}\n${usage}${more}`);
  return code;
}

const io = processIo();
const code = await main(process.argv.slice(2), io);
// Exit explicitly: an exec that stopped reading stdin, or a tunnel's sockets, must not keep
// the process alive once the command is done. Writes to pipes and files are synchronous.
process.exitCode = code;
process.stdout.write("", () => process.exit(code));
