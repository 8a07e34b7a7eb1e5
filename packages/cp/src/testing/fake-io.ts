import { type CommandFrame, CommandPayloads, Protection } from "@denv/spec";
import type { FakeReader, FakeWriter } from "./fake-streams.js";

/** The fake host's commands that move bytes on data streams: exec, files, tunnels. */

export interface FakeIo {
  reader(stream: string): FakeReader;
  writer(stream: string): FakeWriter;
  holds(environment: string): boolean;
  /** Bytes env.files.get sends. */
  fileBytes: number;
}

function notFound(what: string): Error {
  return Object.assign(new Error(`${what} not found`), { code: "not_found" });
}

export async function streamCommand(c: CommandFrame, io: FakeIo): Promise<unknown> {
  switch (c.kind) {
    case "env.exec":
      return exec(c, io);
    case "env.files.put": {
      const { stream, environment, path } = CommandPayloads["env.files.put"].parse(c.payload);
      if (!io.holds(environment)) throw notFound(`environment ${environment}`);
      const error = await io.reader(stream).ended;
      if (error) throw Object.assign(new Error(`upload: ${error}`), { code: "interrupted" });
      return { path, entries: 1, bytes: io.reader(stream).bytes };
    }
    case "env.files.get": {
      const { stream, environment, path } = CommandPayloads["env.files.get"].parse(c.payload);
      if (!io.holds(environment)) throw notFound(`environment ${environment}`);
      if (path === "/missing") throw notFound(`path ${path}`);
      const w = io.writer(stream);
      // 64 KiB blocks filled with their index, so the test can check every byte.
      for (let off = 0; off < io.fileBytes; off += 65536) {
        await w.write("file", Buffer.alloc(Math.min(65536, io.fileBytes - off), off / 65536));
      }
      w.end();
      return { path, bytes: io.fileBytes };
    }
    case "env.connect": {
      // An echo server: tunnel bytes come back as they are.
      const { stream, service, port } = CommandPayloads["env.connect"].parse(c.payload);
      const r = io.reader(stream);
      const w = io.writer(stream);
      let chain = Promise.resolve();
      let bytes = 0;
      r.onData = (_ch, data) => {
        bytes += data.length;
        chain = chain.then(() => w.write("tunnel", data));
      };
      await r.ended;
      await chain;
      w.end();
      return {
        service,
        port,
        address: `10.213.4.3:${port}`,
        bytes_to_service: bytes,
        bytes_from_service: bytes,
      };
    }
    default:
      throw new Error(`${c.kind} moves no stream`);
  }
}

/**
 * Without a stream: `echo` prints its arguments, `cat` its stdin, `false` exits 1. With one:
 * `produce N` writes N bytes to stdout, anything else echoes stdin to stdout as it arrives.
 */
async function exec(c: CommandFrame, io: FakeIo): Promise<unknown> {
  const { exec, stream, environment } = CommandPayloads["env.exec"].parse(c.payload);
  if (!io.holds(environment)) throw notFound(`environment ${environment}`);
  if (exec.user === "root") {
    throw Object.assign(new Error(Protection.agentRoot(exec.service ?? "api")), { code: "agent_root" });
  }
  const argv = exec.cmd ?? ["sh", "-c", exec.shell ?? ""];
  const started = Date.now();
  const result = (stdout: string, exit = 0) => ({
    exit_code: exit,
    stdout,
    stderr: "",
    encoding: "utf8",
    timed_out: false,
    truncated: false,
    duration_ms: Date.now() - started,
  });
  if (!stream) {
    if (argv[0] === "echo") return result(`${argv.slice(1).join(" ")}\n`);
    if (argv[0] === "cat") return result(Buffer.from(exec.stdin ?? "", "base64").toString());
    if (argv[0] === "false") return result("", 1);
    return result(`ran ${argv.join(" ")}\n`);
  }
  const r = io.reader(stream);
  const w = io.writer(stream);
  if (argv[0] === "produce") {
    const total = Number(argv[1] ?? 0);
    for (let off = 0; off < total; off += 65536) {
      await w.write("stdout", Buffer.alloc(Math.min(65536, total - off), 120));
    }
  } else {
    let chain = Promise.resolve();
    r.onData = (_ch, data) => {
      chain = chain.then(() => w.write("stdout", data));
    };
    await r.ended;
    await chain;
    await w.write("stderr", Buffer.from("done\n"));
  }
  w.end();
  return result("");
}
