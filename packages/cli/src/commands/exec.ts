import type { ExecRequest } from "@denv/spec";
import { ExitCodes } from "@denv/spec";
import { allFlags, type CommandSpec } from "../command.js";
import type { Context } from "../context.js";

const USAGE_ARGS =
  "PROJECT/ENV [--service S] [--user U] [--cwd DIR] [-e K=V]... [--timeout SEC] [-i] [-t] -- CMD [ARG...]";

export const exec: CommandSpec = {
  name: "exec",
  summary: "run a command in an environment's service, streaming its input and output",
  args: USAGE_ARGS,
  description: `
Runs CMD in the agent service (or --service) as the agent user (or --user; root is refused on
the agent service of an rl-environment). Output streams as it is produced; standard input is
streamed when -i is given or stdin is not a terminal. The command starts at the first word
after PROJECT/ENV that is not one of exec's flags, or after --.

exit codes: the command's own exit code; 124 when --timeout expired (the whole process tree is
killed); 126 when the command cannot be executed, 127 when it is not found; 125 when denv
itself failed (bad usage, the control plane unreachable or refusing).
--json prints one object: the result with the whole stdout and stderr
({exit_code, stdout, stderr, encoding, timed_out, truncated, duration_ms}).`,
  flags: {
    service: {
      type: "string",
      short: "s",
      value: "S",
      description: "the service (default: the agent service)",
    },
    user: { type: "string", short: "u", value: "U", description: "the user (default: the agent user)" },
    cwd: {
      type: "string",
      short: "w",
      value: "DIR",
      description: "the working directory (default: the agent workdir)",
    },
    env: {
      type: "string",
      short: "e",
      value: "K=V",
      multiple: true,
      description: "set an environment variable (repeatable)",
    },
    timeout: { type: "string", value: "SEC", description: "kill the command after SEC seconds (exit 124)" },
    interactive: { type: "boolean", short: "i", description: "stream stdin even when it is a terminal" },
    tty: {
      type: "boolean",
      short: "t",
      description: "give the command a terminal (stderr merges into stdout)",
    },
  },
  remote: true,
  failureCode: ExitCodes.denvFailure,
  usageCode: ExitCodes.denvFailure,
  split: splitAtCommand,
  async run(ctx) {
    const [ref = ""] = ctx.args(1, 1, "PROJECT/ENV");
    const env = ctx.environment(ref);
    if (ctx.rest.length === 0)
      throw ctx.usage("missing the command to run (e.g. denv exec PROJECT/ENV -- ls -la)");
    const request = buildRequest(ctx);
    const stdin = ctx.io.stdin;
    const streamStdin = ctx.bool("interactive") || stdin.isTTY !== true;
    const raw = ctx.bool("tty") && stdin.isTTY === true && stdin.setRawMode !== undefined;
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    if (raw) stdin.setRawMode?.(true);
    try {
      const result = await ctx.client().execStream(env, request, {
        ...(streamStdin ? { stdin } : {}),
        onStdout: (b) => (ctx.json ? out.push(b) : ctx.io.stdout(b)),
        onStderr: (b) => (ctx.json ? err.push(b) : ctx.io.stderr(b)),
      });
      const code = result.timed_out ? ExitCodes.timedOut : result.exit_code;
      if (ctx.json)
        ctx.print({ ...result, ...encode(Buffer.concat(out), Buffer.concat(err)), exit_code: code }, "");
      else if (result.timed_out)
        ctx.progress(`denv exec: the command timed out after ${request.timeout}s and was killed`);
      if (result.truncated) ctx.progress("denv exec: output was cut at the per-stream limit");
      return code;
    } finally {
      if (raw) stdin.setRawMode?.(false);
      // A command that ends before its input must not keep us reading stdin.
      if (streamStdin) stdin.destroy();
    }
  },
};

function buildRequest(ctx: Context): ExecRequest {
  const env: Record<string, string> = {};
  for (const pair of ctx.strings("env")) {
    const eq = pair.indexOf("=");
    if (eq <= 0) throw ctx.usage(`-e takes K=V, not '${pair}'`);
    env[pair.slice(0, eq)] = pair.slice(eq + 1);
  }
  const timeout = ctx.seconds("timeout");
  const optional = {
    service: ctx.string("service"),
    user: ctx.string("user"),
    cwd: ctx.string("cwd"),
    timeout,
    tty: ctx.bool("tty") ? true : undefined,
    env: Object.keys(env).length > 0 ? env : undefined,
  };
  return {
    cmd: ctx.rest,
    ...Object.fromEntries(Object.entries(optional).filter(([, v]) => v !== undefined)),
  } as ExecRequest;
}

/** Output as the sync route gives it: UTF-8 text when both streams are valid UTF-8, else base64. */
function encode(
  stdout: Buffer,
  stderr: Buffer,
): { stdout: string; stderr: string; encoding: "utf8" | "base64" } {
  const decoder = new TextDecoder("utf-8", { fatal: true });
  try {
    return { stdout: decoder.decode(stdout), stderr: decoder.decode(stderr), encoding: "utf8" };
  } catch {
    return { stdout: stdout.toString("base64"), stderr: stderr.toString("base64"), encoding: "base64" };
  }
}

/**
 * Splits `denv exec [flags] PROJECT/ENV [flags] CMD ARGS...` where the command begins: at `--`,
 * or at the first word after PROJECT/ENV that is not one of exec's flags (as `docker exec`
 * does), so that the command's own flags (`ls -la`) are not read as ours.
 */
function splitAtCommand(args: string[]): { head: string[]; rest: string[] } {
  const flags = allFlags(exec);
  const takesValue = new Set<string>();
  for (const [name, flag] of Object.entries(flags)) {
    if (flag.type !== "string") continue;
    takesValue.add(`--${name}`);
    if (flag.short !== undefined) takesValue.add(`-${flag.short}`);
  }
  const head: string[] = [];
  let seenTarget = false;
  for (let i = 0; i < args.length; i++) {
    const arg = args[i] as string;
    if (arg === "--") return { head, rest: args.slice(i + 1) };
    if (arg.startsWith("-") && arg !== "-") {
      head.push(arg);
      if (takesValue.has(arg) && i + 1 < args.length) head.push(args[++i] as string);
    } else if (!seenTarget) {
      head.push(arg);
      seenTarget = true;
    } else {
      return { head, rest: args.slice(i) };
    }
  }
  return { head, rest: [] };
}
