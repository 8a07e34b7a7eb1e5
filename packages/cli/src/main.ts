#!/usr/bin/env node
import { validate } from "./commands/validate.js";
import { ExitCode, UsageError } from "./exit-codes.js";
import { type Io, processIo } from "./io.js";

type Command = (args: string[], io: Io) => ExitCode;

/** One module per command; this table is the whole dispatcher. */
const COMMANDS: Readonly<Record<string, { run: Command; summary: string }>> = {
  validate: { run: validate, summary: "check a compose file and print the normalized plan" },
};

const USAGE = `usage: denv <command> [args]

commands:
${Object.entries(COMMANDS)
  .map(([name, c]) => `  ${name.padEnd(10)}${c.summary}`)
  .join("\n")}

Run 'denv <command> --help' for a command's flags.
`;

function main(argv: string[], io: Io): ExitCode {
  const [name, ...args] = argv;
  if (name === "--help" || name === "-h" || name === "help") {
    io.stdout(USAGE);
    return ExitCode.ok;
  }
  const command = name !== undefined && Object.hasOwn(COMMANDS, name) ? COMMANDS[name] : undefined;
  if (command === undefined) {
    io.stderr(
      `${name === undefined ? "denv: no command given" : `denv: unknown command '${name}'`}\n\n${USAGE}`,
    );
    return ExitCode.usage;
  }
  try {
    return command.run(args, io);
  } catch (err) {
    if (!(err instanceof UsageError)) throw err;
    if (args.includes("--json")) {
      io.stdout(
        `${JSON.stringify({ ok: false, error: { code: "invalid_request", message: err.message } })}\n`,
      );
    }
    io.stderr(`denv ${name}: ${err.message}\n${err.usage}\n`);
    return ExitCode.usage;
  }
}

process.exitCode = main(process.argv.slice(2), processIo());
