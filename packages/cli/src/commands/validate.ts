import { readFileSync } from "node:fs";
import path from "node:path";
import { parseArgs } from "node:util";
import { ExitCodes, validateCompose } from "@denv/spec";
import { composeContextFor, DEFAULT_COMPOSE_FILES, findComposeFile } from "../compose-files.js";
import { UsageError } from "../exit-codes.js";
import type { Io } from "../io.js";
import { planText } from "../plan-text.js";

export const VALIDATE_USAGE = "usage: denv validate [FILE] [--json]";

export const VALIDATE_HELP = `${VALIDATE_USAGE}

Validates a compose file against the subset denv accepts and prints the normalized plan:
services in start order with caps applied, the agent service, user and workdir, the verifier
and notes. A refused file prints every refusal, one per line, on stderr.

FILE defaults to the first of ${DEFAULT_COMPOSE_FILES.join(", ")} in the current folder.

  --json   print one JSON object on stdout: {"ok":true,"plan":...,"notes":[...]},
           {"ok":false,"refusals":[...]} or {"ok":false,"error":{"code":...,"message":...}}

exit codes: 0 valid, 1 refused or unreadable, 2 bad usage
`;

/** `denv validate [FILE] [--json]`. */
export function validate(args: string[], io: Io): number {
  let parsed: ReturnType<typeof parseValidateArgs>;
  try {
    parsed = parseValidateArgs(args);
  } catch (err) {
    // node:util parseArgs throws TypeErrors with an ERR_PARSE_ARGS_* code for bad flags.
    const code = (err as NodeJS.ErrnoException).code ?? "";
    if (!code.startsWith("ERR_PARSE_ARGS")) throw err;
    const flag = /'([^']+)'/.exec((err as Error).message)?.[1];
    throw new UsageError(
      code === "ERR_PARSE_ARGS_UNKNOWN_OPTION" && flag !== undefined
        ? `unknown flag '${flag}'`
        : (err as Error).message,
      VALIDATE_USAGE,
    );
  }
  if (parsed.values.help === true) {
    io.stdout(VALIDATE_HELP);
    return ExitCodes.ok;
  }
  if (parsed.positionals.length > 1) throw new UsageError("validate takes at most one FILE", VALIDATE_USAGE);
  const json = parsed.values.json === true;

  const fail = (code: string, message: string): number => {
    if (json) io.stdout(`${JSON.stringify({ ok: false, error: { code, message } })}\n`);
    else io.stderr(`denv validate: ${message}\n`);
    return ExitCodes.failure;
  };

  const given = parsed.positionals[0];
  const file = given ?? findComposeFile(io.cwd);
  if (file === undefined) {
    return fail("not_found", `no compose file in ${io.cwd} (looked for ${DEFAULT_COMPOSE_FILES.join(", ")})`);
  }
  const abs = path.resolve(io.cwd, file);
  let text: string;
  try {
    text = readFileSync(abs, "utf8");
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    const why = code === "ENOENT" ? "no such file" : code === "EISDIR" ? "is a folder" : String(err);
    return fail("not_found", `cannot read ${file}: ${why}`);
  }

  const context = composeContextFor(abs, file, io.env);
  if (!context.ok) return fail("invalid_compose", context.message);
  const result = validateCompose(text, context.ctx);

  if (json) {
    io.stdout(`${JSON.stringify(result)}\n`);
  } else if (result.ok) {
    io.stdout(planText(result.plan, file));
  } else {
    io.stderr(result.refusals.map((line) => `${line}\n`).join(""));
  }
  return result.ok ? ExitCodes.ok : ExitCodes.failure;
}

function parseValidateArgs(args: string[]) {
  return parseArgs({
    args,
    allowPositionals: true,
    strict: true,
    options: { json: { type: "boolean" }, help: { type: "boolean", short: "h" } },
  });
}
