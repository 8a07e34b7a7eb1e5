import {
  DenvError,
  type Environment,
  type ExecRequest,
  type ExecResponse,
  Protection,
  splitShellWords,
} from "@denv/spec";

/**
 * The fake's commands: a few programs with the behaviour the exec contract promises (exit
 * codes passed through, 124 on timeout, 126/127 when a command cannot start, stdin streamed,
 * root refused on the agent service of an rl-environment).
 *
 *   echo ARGS | cat | printenv NAME | whoami | pwd | exit N | sleep SEC | fail-with N TEXT
 *   | noexec | big BYTES (prints BYTES bytes of "x")
 */

export type Output = (stream: "stdout" | "stderr", bytes: Buffer) => void;

export function checkExec(env: Environment, req: ExecRequest, kind: string): void {
  const service = req.service ?? env.agent?.service ?? "main";
  if (!env.services.some((s) => s.name === service)) {
    throw new DenvError("not_found", `environment ${env.id} has no service '${service}'`);
  }
  const agent = service === env.agent?.service;
  if (agent && kind === "rl-environment" && req.user !== undefined && /^(root|0)(:|$)/.test(req.user)) {
    throw new DenvError("agent_root", Protection.agentRoot(service));
  }
}

export async function runFake(
  env: Environment,
  req: ExecRequest,
  stdin: AsyncIterable<Buffer>,
  out: Output,
): Promise<ExecResponse> {
  const started = Date.now();
  const argv = req.cmd ?? ["sh", "-c", req.shell ?? ""];
  // `sh -c "..."` runs its words as one of our programs.
  const words = argv[0] === "sh" && argv[1] === "-c" ? splitWords(argv[2] ?? "") : argv;
  const [program = "", ...args] = words;
  const result = (exit_code: number, timed_out = false): ExecResponse => ({
    exit_code,
    stdout: "",
    stderr: "",
    encoding: "utf8",
    timed_out,
    truncated: false,
    duration_ms: Date.now() - started,
  });
  const text = (stream: "stdout" | "stderr", s: string) => out(stream, Buffer.from(s));

  switch (program) {
    case "echo":
      text("stdout", `${args.join(" ")}\n`);
      return result(0);
    case "cat":
      for await (const chunk of stdin) out("stdout", chunk);
      return result(0);
    case "printenv":
      if (req.env?.[args[0] ?? ""] === undefined) return result(1);
      text("stdout", `${req.env[args[0] ?? ""]}\n`);
      return result(0);
    case "whoami":
      text("stdout", `${req.user ?? env.agent?.user ?? "root"}\n`);
      return result(0);
    case "pwd":
      text("stdout", `${req.cwd ?? env.agent?.workdir ?? "/"}\n`);
      return result(0);
    case "exit":
      return result(Number(args[0] ?? 0));
    case "fail-with":
      text("stderr", `${args.slice(1).join(" ")}\n`);
      return result(Number(args[0] ?? 1));
    case "sleep": {
      const seconds = Number(args[0] ?? 0);
      const limit = req.timeout ?? Number.POSITIVE_INFINITY;
      await new Promise((r) => setTimeout(r, Math.min(seconds, limit) * 1000));
      return seconds > limit ? result(124, true) : result(0);
    }
    case "big":
      text("stdout", "x".repeat(Number(args[0] ?? 0)));
      return result(0);
    case "noexec":
      text("stderr", "denv-fake: noexec: permission denied\n");
      return result(126);
    default:
      text("stderr", `denv-fake: ${program}: not found\n`);
      return result(127);
  }
}

function splitWords(shell: string): string[] {
  try {
    return splitShellWords(shell);
  } catch {
    return ["sh-syntax-error"];
  }
}

export async function* once(bytes: Buffer): AsyncGenerator<Buffer> {
  if (bytes.length > 0) yield bytes;
}
