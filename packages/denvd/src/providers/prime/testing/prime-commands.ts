import type { IncomingMessage, ServerResponse } from "node:http";
import {
  ConnectError,
  ConnectStream,
  protoCodec,
  requestBytes,
  sendError,
  sendUnary,
} from "../../e2b/testing/e2b-connect.js";
import type { DoubleDocker, Spawned } from "../../testing/double-docker.js";
import {
  decodeSendInput,
  decodeSendSignal,
  decodeStartRequest,
  encodeEvent,
  type SessionSignal,
} from "../prime-proto.js";

interface Session {
  container: string;
  /** The process group's id in the container (its first process's pid), once it started. */
  pid: number;
  process?: Spawned;
  stdin: boolean;
  ended: boolean;
}

/**
 * The gateway's command sessions (`command_session.CommandSession`, Connect with the binary
 * codec): Start runs `cmd args` as the spec's user (root when unset) with its envs and cwd and
 * streams a start event, output events and an end event; SendInput writes to a session opened
 * with stdin; SendSignal signals its process group. A session's process runs under a shell that
 * first prints its pid (the double's way to learn the group to signal; the line is not
 * forwarded). The `connect-timeout-ms` deadline kills the group and ends the stream with
 * deadline_exceeded; a client that goes away kills it too.
 */
export class CommandSessions {
  private readonly sessions = new Map<string, Session>();

  constructor(private readonly docker: DoubleDocker) {}

  /** Serves one RPC of the service for the sandbox whose container is `container`. */
  async handle(
    rpc: string,
    container: string,
    req: IncomingMessage,
    res: ServerResponse,
    body: Buffer,
  ): Promise<void> {
    try {
      if (rpc === "Start") return await this.start(container, req, res, body);
      if (rpc === "SendInput") {
        const r = decodeSendInput(requestBytes(req, body));
        const s = this.session(r.sessionUuid, container);
        if (!s.stdin || !s.process) throw new ConnectError("failed_precondition", "session has no stdin");
        s.process.write(r.stdin);
        return sendUnary(res, Buffer.alloc(0), protoCodec);
      }
      if (rpc === "SendSignal") {
        const r = decodeSendSignal(requestBytes(req, body));
        await this.signal(this.session(r.sessionUuid, container), r.signal);
        return sendUnary(res, Buffer.alloc(0), protoCodec);
      }
      throw new ConnectError("unimplemented", `command_session.CommandSession/${rpc} is not implemented`);
    } catch (e) {
      const error = e instanceof ConnectError ? e : new ConnectError("invalid_argument", String(e));
      if (!res.headersSent) sendError(res, error);
      else res.end();
    }
  }

  private session(uuid: string, container: string): Session {
    const s = this.sessions.get(uuid);
    if (!s || s.container !== container || s.ended) throw new ConnectError("not_found", `no session ${uuid}`);
    return s;
  }

  private async signal(s: Session, signal: SessionSignal): Promise<void> {
    if (s.ended || s.pid === 0) return;
    const sig = signal === "SIGKILL" ? "KILL" : "TERM";
    await this.docker.run(s.container, ["sh", "-c", `kill -s ${sig} -- -${s.pid} 2>/dev/null; true`]);
  }

  private async start(
    container: string,
    req: IncomingMessage,
    res: ServerResponse,
    body: Buffer,
  ): Promise<void> {
    const r = decodeStartRequest(requestBytes(req, body));
    if (!r.command.cmd) throw new ConnectError("invalid_argument", "command.cmd is required");
    if (r.sessionUuid && this.sessions.has(r.sessionUuid))
      throw new ConnectError("failed_precondition", `session ${r.sessionUuid} exists already`);
    const s: Session = { container, pid: 0, stdin: r.stdin, ended: false };
    if (r.sessionUuid) this.sessions.set(r.sessionUuid, s);
    // Made once the engine took the process, so that a refused exec is still a plain error; the
    // engine's output events come on later turns of the loop, after it exists.
    let stream: ConnectStream | undefined;
    let head = Buffer.alloc(0);
    const early: Buffer[] = [];
    s.process = await this.docker.spawn(container, {
      cmd: ["/bin/sh", "-c", 'echo "$$"; exec "$@"', "sh", r.command.cmd, ...r.command.args],
      user: r.command.user ?? "root",
      ...(r.command.cwd !== undefined ? { cwd: r.command.cwd } : {}),
      env: r.command.envs,
      stdin: r.stdin,
      onStdout: (chunk) => {
        if (!stream) return;
        if (s.pid !== 0) return stream.send(encodeEvent({ kind: "stdout", data: chunk }));
        head = Buffer.concat([head, chunk]);
        const nl = head.indexOf("\n");
        const line = nl < 0 ? "" : head.subarray(0, nl).toString();
        // Not our shell's pid line: the engine's refusal (unknown user, missing cwd), kept for the error.
        if (!/^\d+$/.test(line)) return;
        s.pid = Number(line);
        stream.send(encodeEvent({ kind: "start", pid: s.pid }));
        for (const e of early) stream.send(encodeEvent({ kind: "stderr", data: e }));
        const rest = head.subarray(nl + 1);
        if (rest.length > 0) stream.send(encodeEvent({ kind: "stdout", data: rest }));
      },
      onStderr: (chunk) => {
        if (!stream) return;
        if (s.pid === 0) early.push(chunk);
        else stream.send(encodeEvent({ kind: "stderr", data: chunk }));
      },
    });
    stream = new ConnectStream(res, protoCodec);
    const timeoutMs = Number(req.headers["connect-timeout-ms"] ?? 0);
    let timedOut = false;
    const timer =
      timeoutMs > 0
        ? setTimeout(() => {
            timedOut = true;
            void this.signal(s, "SIGKILL").catch(() => undefined);
          }, timeoutMs)
        : undefined;
    const gone = () => {
      if (!s.ended) void this.signal(s, "SIGKILL").catch(() => undefined);
    };
    res.once("close", gone);
    const exitCode = await s.process.exited;
    s.ended = true;
    // Prime keeps an ended session a while for Connect to replay its end; the double has no Connect.
    if (r.sessionUuid) this.sessions.delete(r.sessionUuid);
    clearTimeout(timer);
    res.off("close", gone);
    if (timedOut)
      return stream.end(new ConnectError("deadline_exceeded", `command timed out after ${timeoutMs} ms`));
    if (s.pid === 0) {
      // The shell never ran: the engine refused the user or the cwd; its words are the output.
      const why =
        Buffer.concat([head, ...early])
          .toString()
          .trim() || `exit code ${exitCode}`;
      return stream.end(new ConnectError("failed_precondition", why));
    }
    stream.send(encodeEvent({ kind: "end", exitCode, status: `exit status ${exitCode}` }));
    stream.end();
  }
}
