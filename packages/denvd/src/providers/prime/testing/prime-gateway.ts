import { randomBytes } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import { ConnectError, sendError } from "../../e2b/testing/e2b-connect.js";
import type { DoubleDocker } from "../../testing/double-docker.js";
import { ApiError } from "./prime-api-error.js";
import { CommandSessions } from "./prime-commands.js";
import type { Sandboxes } from "./prime-sandboxes.js";

/** How long a gateway token lives; the SDK refreshes its cached one 60 s before expiry. */
const TOKEN_TTL_MS = 60 * 60 * 1000;
const RPC_PREFIX = "command_session.CommandSession/";

/**
 * The sandbox gateway: POST /sandbox/{id}/auth (on the API) hands out a token for one sandbox
 * and the address `{gateway_url}/{user_ns}/{job_id}`, under which the SDK calls /upload
 * (multipart `file`, `?path=`), /download and /read-file (`?path=`), and the command-session
 * RPCs. Every call must carry `Authorization: Bearer <token>` of that sandbox, unexpired: else
 * 401 (Connect's unauthenticated on the RPCs), which the SDK answers with one re-auth. Files
 * are read and written as root, as the file API takes no user.
 */
export class Gateway {
  readonly userNs = `ns-${randomBytes(6).toString("hex")}`;
  readonly commands: CommandSessions;
  url = "";
  private readonly tokens = new Map<string, { sandboxId: string; expires: number }>();
  private readonly jobs = new Map<string, string>();

  constructor(
    private readonly docker: DoubleDocker,
    private readonly sandboxes: Sandboxes,
  ) {
    this.commands = new CommandSessions(docker);
  }

  /** POST /sandbox/{id}/auth. */
  auth(sandboxId: string): object {
    const sb = this.sandboxes.get(sandboxId);
    if (sb.status === "TERMINATED") throw new ApiError(404, `Sandbox ${sandboxId} not found`);
    let jobId = [...this.jobs].find(([, id]) => id === sandboxId)?.[0];
    if (!jobId) {
      jobId = `job-${randomBytes(8).toString("hex")}`;
      this.jobs.set(jobId, sandboxId);
    }
    const token = randomBytes(24).toString("base64url");
    const expires = Date.now() + TOKEN_TTL_MS;
    this.tokens.set(token, { sandboxId, expires });
    return {
      token,
      gateway_url: this.url,
      user_ns: this.userNs,
      job_id: jobId,
      expires_at: new Date(expires).toISOString(),
    };
  }

  /** Expires every token at once (a test's way to make the SDK re-authenticate). */
  revokeTokens(): void {
    this.tokens.clear();
  }

  async handle(req: IncomingMessage, res: ServerResponse, body: Buffer): Promise<void> {
    const url = new URL(req.url ?? "/", "http://x");
    const m = /^\/([^/]+)\/([^/]+)\/(.+)$/.exec(url.pathname);
    const rpc = m?.[3]?.startsWith(RPC_PREFIX) ? m[3].slice(RPC_PREFIX.length) : undefined;
    try {
      const sandboxId = m && m[1] === this.userNs ? this.jobs.get(m[2] ?? "") : undefined;
      if (!m || !sandboxId) throw new ApiError(404, "no such route", "not_found");
      const bearer = /^Bearer (.+)$/.exec(req.headers.authorization ?? "")?.[1] ?? "";
      const grant = this.tokens.get(bearer);
      if (!grant || grant.sandboxId !== sandboxId || grant.expires < Date.now())
        throw new ApiError(401, "invalid or expired token", "unauthorized");
      const container = this.sandboxes.container(sandboxId);
      if (rpc !== undefined) return await this.commands.handle(rpc, container, req, res, body);
      const path = url.searchParams.get("path");
      if (!path) throw new ApiError(400, "path is required", "bad_request");
      const route = `${req.method} ${m[3]}`;
      if (route === "POST upload") return send(res, 200, await this.upload(container, path, req, body));
      if (route === "GET download") {
        const data = await this.read(container, path);
        res.writeHead(200, { "content-type": "application/octet-stream", "content-length": data.length });
        return void res.end(data);
      }
      if (route === "GET read-file") {
        const data = await this.read(container, path);
        return send(res, 200, { content: data.toString(), size: data.length });
      }
      throw new ApiError(404, "no such route", "not_found");
    } catch (e) {
      if (rpc !== undefined && e instanceof ApiError) {
        // The SDK reads not_found as "the sandbox is gone".
        const code =
          e.status === 401
            ? "unauthenticated"
            : [404, 410, 502].includes(e.status)
              ? "not_found"
              : "unavailable";
        return sendError(res, new ConnectError(code, e.message), e.status);
      }
      if (!(e instanceof ApiError)) throw e;
      send(res, e.status, { error: e.code, message: e.message });
    }
  }

  private async upload(container: string, path: string, req: IncomingMessage, body: Buffer): Promise<object> {
    const data = multipartFile(req.headers["content-type"] ?? "", body);
    const r = await this.docker.run(
      container,
      ["sh", "-c", 'mkdir -p -- "$(dirname -- "$1")" && cat > "$1"', "sh", path],
      { stdin: data },
    );
    if (r.exitCode !== 0) throw new ApiError(400, r.stderr.toString().trim(), "write_failed");
    return { success: true, path, size: data.length, timestamp: new Date().toISOString() };
  }

  private async read(container: string, path: string): Promise<Buffer> {
    const r = await this.docker.run(container, [
      "sh",
      "-c",
      'test -f "$1" || { echo "$1: no such file" >&2; exit 2; }; cat -- "$1"',
      "sh",
      path,
    ]);
    if (r.exitCode === 2) throw new ApiError(404, `File not found: ${path}`, "file_not_found");
    if (r.exitCode !== 0) throw new ApiError(400, r.stderr.toString().trim(), "read_failed");
    return r.stdout;
  }
}

function send(res: ServerResponse, status: number, json: unknown): void {
  res.writeHead(status, { "content-type": "application/json" });
  res.end(JSON.stringify(json));
}

/** The `file` part of a multipart/form-data body. */
function multipartFile(contentType: string, body: Buffer): Buffer {
  const boundary = /boundary="?([^";]+)"?/.exec(contentType)?.[1];
  if (!boundary) throw new ApiError(400, "expected multipart/form-data", "bad_request");
  const delimiter = Buffer.from(`--${boundary}`);
  let at = body.indexOf(delimiter);
  while (at >= 0) {
    const next = body.indexOf(delimiter, at + delimiter.length);
    if (next < 0) break;
    const part = body.subarray(at + delimiter.length + 2, next - 2);
    const split = part.indexOf("\r\n\r\n");
    if (split >= 0 && /name="file"/.test(part.subarray(0, split).toString())) return part.subarray(split + 4);
    at = next;
  }
  throw new ApiError(400, "the form has no file part", "bad_request");
}
