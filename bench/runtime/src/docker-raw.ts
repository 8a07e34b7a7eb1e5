import type Docker from "dockerode";

/** Engine API calls with no denv logic in between: the baselines' and the floors' side. */

export interface RawExec {
  exitCode: number | null;
  stdout: string;
  stderr: string;
}

/** exec create + start (hijacked, demultiplexed) + inspect, as a bare client does it. */
export async function rawExec(
  docker: Docker,
  containerId: string,
  argv: string[],
  opts: { user?: string; cwd?: string } = {},
): Promise<RawExec> {
  const exec = await docker.getContainer(containerId).exec({
    Cmd: argv,
    AttachStdout: true,
    AttachStderr: true,
    ...(opts.user !== undefined ? { User: opts.user } : {}),
    ...(opts.cwd !== undefined ? { WorkingDir: opts.cwd } : {}),
  });
  const stream = await exec.start({ hijack: true, stdin: false });
  const out: Buffer[] = [];
  const err: Buffer[] = [];
  await new Promise<void>((resolve, reject) => {
    docker.modem.demuxStream(
      stream,
      { write: (b: Buffer) => out.push(b) } as unknown as NodeJS.WritableStream,
      { write: (b: Buffer) => err.push(b) } as unknown as NodeJS.WritableStream,
    );
    stream.on("end", () => resolve());
    stream.on("error", reject);
  });
  const info = await exec.inspect();
  return {
    exitCode: info.ExitCode,
    stdout: Buffer.concat(out).toString("utf8"),
    stderr: Buffer.concat(err).toString("utf8"),
  };
}
