import { spawn } from "node:child_process";

export interface RunResult {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs a host program (iptables, btrfs, nsenter, ...) without a shell. */
export function run(
  file: string,
  args: string[],
  opts: { timeoutMs?: number; input?: string } = {},
): Promise<RunResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(file, args, {
      stdio: [opts.input === undefined ? "ignore" : "pipe", "pipe", "pipe"],
    });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    child.stdout?.on("data", (b: Buffer) => out.push(b));
    child.stderr?.on("data", (b: Buffer) => err.push(b));
    const timer = opts.timeoutMs ? setTimeout(() => child.kill("SIGKILL"), opts.timeoutMs) : undefined;
    child.on("error", (e) => {
      if (timer) clearTimeout(timer);
      reject(e);
    });
    child.on("close", (code) => {
      if (timer) clearTimeout(timer);
      resolve({
        code: code ?? 128,
        stdout: Buffer.concat(out).toString("utf8"),
        stderr: Buffer.concat(err).toString("utf8"),
      });
    });
    if (child.stdin) {
      child.stdin.on("error", () => undefined); // the program may exit without reading its input
      child.stdin.end(opts.input);
    }
  });
}

/** As `run`, but a non-zero exit is an error naming the command and its stderr. */
export async function runOk(
  file: string,
  args: string[],
  opts: { timeoutMs?: number } = {},
): Promise<string> {
  const r = await run(file, args, opts);
  if (r.code !== 0) throw new Error(`${file} ${args.join(" ")} exited ${r.code}: ${r.stderr.trim()}`);
  return r.stdout;
}
