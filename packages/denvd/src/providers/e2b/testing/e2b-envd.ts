import { readFile } from "node:fs/promises";
import type { IncomingMessage, ServerResponse } from "node:http";
import {
  ConnectError,
  ConnectStream,
  isStreaming,
  requestMessage,
  sendError,
  sendUnary,
} from "./e2b-connect.js";
import type { Engine } from "./e2b-docker.js";
import { EnvdFiles, homeOf } from "./e2b-files.js";

/** What envd needs to know of a sandbox: its container and the token its callers must present. */
export interface EnvdSandbox {
  containerId: string;
  envdAccessToken: string;
  paused?: boolean;
  /** Who a call that names no user acts as ("user" if unset), and where its commands run. */
  user?: string;
  workdir?: string;
}

interface ProcessConfig {
  cmd: string;
  args?: string[];
  envs?: Record<string, string>;
  cwd?: string;
}

interface RunningProcess {
  config: ProcessConfig;
  tag?: string;
  execId?: string;
}

/** The user a call acts as: `Authorization: Basic base64("<user>:")`, else the sandbox's default. */
function callerUser(req: IncomingMessage, sb: EnvdSandbox): string {
  const fallback = sb.user ?? "user";
  const m = /^Basic (.+)$/.exec(req.headers.authorization ?? "");
  if (!m?.[1]) return fallback;
  return Buffer.from(m[1], "base64").toString().split(":")[0] || fallback;
}

/**
 * envd, the daemon inside each E2B sandbox, for every sandbox of one server: the SDK sends all
 * calls to one URL with `E2b-Sandbox-Id` naming the sandbox and `X-Access-Token` carrying the
 * token the create response gave it. Processes are `docker exec`s in the sandbox's container; the
 * pid the SDK sees is one this envd hands out (the SDK uses it only as a handle).
 */
export class Envd {
  private nextPid = 100;
  private readonly processes = new Map<string, Map<number, RunningProcess>>();
  readonly files: EnvdFiles;

  constructor(
    private readonly engine: Engine,
    private readonly sandbox: (id: string) => EnvdSandbox | undefined,
  ) {
    this.files = new EnvdFiles(engine);
  }

  async handle(req: IncomingMessage, res: ServerResponse, body: Buffer): Promise<void> {
    const url = new URL(req.url ?? "/", "http://x");
    const id = String(req.headers["e2b-sandbox-id"] ?? "");
    const sb = this.sandbox(id);
    const rpc = url.pathname.startsWith("/process.") || url.pathname.startsWith("/filesystem.");
    // E2B's edge answers 502 for a sandbox that is gone; the SDK reads that as "not running".
    if (!sb) return this.fail(res, rpc, 502, new ConnectError("unavailable", `sandbox ${id} not found`));
    // A paused sandbox's envd is frozen with it: E2B's edge answers as for one not running.
    if (sb.paused)
      return this.fail(res, rpc, 502, new ConnectError("unavailable", `sandbox ${id} is paused`));
    if (req.headers["x-access-token"] !== sb.envdAccessToken)
      return this.fail(res, rpc, 401, new ConnectError("unauthenticated", "invalid access token"));
    try {
      if (url.pathname === "/health") {
        res.writeHead(204).end();
        return;
      }
      // The HTTP file routes name their user in the `username` query parameter.
      const fileUser = url.searchParams.get("username") || callerUser(req, sb);
      if (url.pathname === "/files" && req.method === "GET")
        return await this.files.read(res, sb.containerId, fileUser, url.searchParams);
      if (url.pathname === "/files" && req.method === "POST")
        return await this.files.write(req, res, body, sb.containerId, fileUser, url.searchParams);
      if (!rpc || req.method !== "POST") {
        res.writeHead(404, { "content-type": "application/json" });
        res.end(JSON.stringify({ code: 404, message: `no route ${req.method} ${url.pathname}` }));
        return;
      }
      const msg = requestMessage(req, body);
      switch (url.pathname) {
        case "/process.Process/Start":
          return await this.start(req, res, id, sb, msg);
        case "/process.Process/List":
          return sendUnary(res, { processes: this.list(id) });
        case "/process.Process/SendSignal":
          return sendUnary(res, await this.signal(id, sb.containerId, msg));
        case "/filesystem.Filesystem/Stat":
          return sendUnary(res, { entry: await this.files.stat(sb.containerId, callerUser(req, sb), msg) });
        case "/filesystem.Filesystem/ListDir":
          return sendUnary(res, {
            entries: await this.files.listDir(sb.containerId, callerUser(req, sb), msg),
          });
        default:
          throw new ConnectError("unimplemented", `${url.pathname} is not implemented by this test double`);
      }
    } catch (e) {
      const err = e instanceof ConnectError ? e : new ConnectError("internal", String(e));
      if (res.headersSent) res.end();
      else sendError(res, err);
    }
  }

  private fail(res: ServerResponse, rpc: boolean, status: number, e: ConnectError): void {
    if (rpc) {
      sendError(res, e, status);
      return;
    }
    res.writeHead(status, { "content-type": "application/json" });
    res.end(JSON.stringify({ code: status, message: e.message }));
  }

  /** process.Process/Start: a start event, the output as it comes, an end event, end of stream. */
  private async start(
    req: IncomingMessage,
    res: ServerResponse,
    sandboxId: string,
    sb: EnvdSandbox,
    msg: Record<string, unknown>,
  ): Promise<void> {
    const containerId = sb.containerId;
    if (!isStreaming(req)) throw new ConnectError("invalid_argument", "Start is a server-streaming call");
    const config = msg.process as ProcessConfig | undefined;
    if (!config?.cmd) throw new ConnectError("invalid_argument", "process.cmd is required");
    const user = callerUser(req, sb);
    const table = this.processes.get(sandboxId) ?? new Map<number, RunningProcess>();
    this.processes.set(sandboxId, table);
    const pid = this.nextPid++;
    const proc: RunningProcess = { config, tag: msg.tag as string | undefined };
    table.set(pid, proc);
    const stream = new ConnectStream(res);
    stream.send({ event: { start: { pid } } });
    const timers: NodeJS.Timeout[] = [];
    const keepalive = Number(req.headers["keepalive-ping-interval"] ?? 0);
    if (keepalive > 0)
      timers.push(setInterval(() => stream.send({ event: { keepalive: {} } }), keepalive * 1000));
    let deadlinePassed = false;
    const deadline = Number(req.headers["connect-timeout-ms"] ?? 0);
    if (deadline > 0)
      timers.push(
        setTimeout(() => {
          deadlinePassed = true;
          void this.kill(containerId, proc, "KILL").catch(() => undefined);
        }, deadline),
      );
    try {
      const r = await this.engine.exec(containerId, {
        cmd: [config.cmd, ...(config.args ?? [])],
        user,
        cwd: config.cwd || sb.workdir || homeOf(user),
        env: config.envs,
        onStarted: (execId) => {
          proc.execId = execId;
        },
        onStdout: (b) => stream.send({ event: { data: { stdout: b.toString("base64") } } }),
        onStderr: (b) => stream.send({ event: { data: { stderr: b.toString("base64") } } }),
      });
      if (deadlinePassed)
        return stream.end(new ConnectError("deadline_exceeded", "the command's timeout passed"));
      const status = r.exitCode > 128 ? `signal: ${r.exitCode - 128}` : `exit status ${r.exitCode}`;
      const end = {
        exitCode: r.exitCode,
        exited: r.exitCode <= 128,
        status,
        error: r.exitCode === 0 ? undefined : status,
      };
      stream.send({ event: { end } });
      stream.end();
    } catch (e) {
      stream.end(new ConnectError("internal", String(e)));
    } finally {
      for (const t of timers) clearTimeout(t);
      table.delete(pid);
    }
  }

  private list(sandboxId: string): unknown[] {
    return [...(this.processes.get(sandboxId) ?? new Map<number, RunningProcess>())].map(([pid, p]) => ({
      config: p.config,
      pid,
      tag: p.tag,
    }));
  }

  /** process.Process/SendSignal: SIGKILL (9) or SIGTERM (15) to a process this envd started. */
  private async signal(
    sandboxId: string,
    containerId: string,
    msg: Record<string, unknown>,
  ): Promise<object> {
    const selector = (msg.process ?? {}) as { pid?: number; tag?: string };
    const table = this.processes.get(sandboxId);
    const entry = [...(table ?? [])].find(([pid, p]) =>
      selector.pid !== undefined ? pid === selector.pid : p.tag === selector.tag,
    );
    if (!entry) throw new ConnectError("not_found", `process ${selector.pid ?? selector.tag} not found`);
    const sig = msg.signal === "SIGNAL_SIGTERM" || msg.signal === 15 ? "TERM" : "KILL";
    await this.kill(containerId, entry[1], sig);
    return {};
  }

  /**
   * Signals an exec's process: the engine reports its pid in the host's namespace, and the host's
   * /proc names it in the container's (the last NSpid field), which is what `kill` inside needs.
   */
  private async kill(containerId: string, proc: RunningProcess, sig: "KILL" | "TERM"): Promise<void> {
    if (!proc.execId) throw new ConnectError("unavailable", "the process has not started yet");
    const hostPid = await this.engine.execPid(proc.execId);
    const status = await readFile(`/proc/${hostPid}/status`, "utf8").catch(() => "");
    const nspid = /^NSpid:\s+(.+)$/m.exec(status)?.[1]?.trim().split(/\s+/).pop();
    if (!nspid) throw new ConnectError("internal", `cannot find the process (host pid ${hostPid}) in /proc`);
    await this.engine.exec(containerId, { cmd: ["kill", "-s", sig, nspid], user: "root" });
  }
}
