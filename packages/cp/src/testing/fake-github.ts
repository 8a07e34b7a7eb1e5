import { spawn, spawnSync } from "node:child_process";
import { createVerify, generateKeyPairSync, type KeyObject, randomBytes, randomUUID } from "node:crypto";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { signWebhook } from "../github/webhook-signature.js";

/**
 * GitHub on loopback, for tests: the REST routes the control plane calls (the app's JWT checked
 * against the app's public key, installation tokens, repositories, check runs create/update) and
 * real git repositories over smart HTTP (Debian's `git http-backend` as a CGI), private: fetches
 * need an installation token. A push received over HTTP is delivered to the webhook URL as
 * GitHub delivers it (a signed `push`), and tests can deliver any event themselves.
 */

export interface CheckRun {
  id: number;
  repository: string;
  name: string;
  head_sha: string;
  status: string;
  conclusion?: string;
  details_url?: string;
  external_id?: string;
  output?: { title: string; summary: string; text?: string };
  /** Every status the check run went through, in order (created first). */
  history: string[];
}

export interface Delivery {
  id: string;
  event: string;
  status: number;
  body: unknown;
}

export class FakeGithub {
  readonly appId = 4242;
  readonly installationId = 777;
  readonly webhookSecret = randomBytes(16).toString("hex");
  readonly privateKeyPem: string;
  private readonly publicKey: KeyObject;
  private server!: Server;
  url = "";
  /** Where pushes are delivered (the cp's /v1/github/webhook). */
  webhookUrl = "";
  readonly checkRuns: CheckRun[] = [];
  readonly deliveries: Delivery[] = [];
  readonly tokensIssued: string[] = [];
  /** Git requests served, by path, with whether they carried a valid token. */
  readonly gitRequests: Array<{ path: string; authorized: boolean }> = [];
  private tokens = new Map<string, number>();
  private repos = new Map<string, { defaultBranch: string }>();

  private constructor(
    readonly root: string,
    keys: { privateKey: string; publicKey: KeyObject },
  ) {
    this.privateKeyPem = keys.privateKey;
    this.publicKey = keys.publicKey;
  }

  static async start(): Promise<FakeGithub> {
    const root = await mkdtemp(join(tmpdir(), "denv-fake-github-"));
    const pair = generateKeyPairSync("rsa", { modulusLength: 2048 });
    const g = new FakeGithub(root, {
      privateKey: pair.privateKey.export({ type: "pkcs1", format: "pem" }).toString(),
      publicKey: pair.publicKey,
    });
    g.server = createServer((req, res) => {
      g.serve(req, res).catch((err: unknown) => {
        if (!res.headersSent) res.writeHead(500, { "content-type": "application/json" });
        res.end(JSON.stringify({ message: String(err) }));
      });
    });
    await new Promise<void>((r) => g.server.listen(0, "127.0.0.1", r));
    const a = g.server.address();
    g.url = `http://127.0.0.1:${typeof a === "object" && a ? a.port : 0}`;
    return g;
  }

  /** The app's private key as a file (what --github-private-key-file names). */
  async writePrivateKey(dir: string): Promise<string> {
    const path = join(dir, "github-app.pem");
    await writeFile(path, this.privateKeyPem, { mode: 0o600 });
    return path;
  }

  /** A bare repository OWNER/REPO on which the app is installed, with http pushes allowed. */
  async createRepository(fullName: string, defaultBranch = "main"): Promise<string> {
    const dir = join(this.root, `${fullName}.git`);
    await mkdir(dir, { recursive: true });
    git(["init", "--bare", "-q", `--initial-branch=${defaultBranch}`, dir]);
    git(["-C", dir, "config", "http.receivepack", "true"]);
    this.repos.set(fullName.toLowerCase(), { defaultBranch });
    return dir;
  }

  /** git's clone URL of a repository here (what --github-web-url makes of it). */
  cloneUrl(fullName: string): string {
    return `${this.url}/${fullName}.git`;
  }

  /** An installation token for a test's own calls (git push, reading check runs). */
  issueToken(): string {
    const token = `ghs_${randomBytes(18).toString("hex")}`;
    this.tokens.set(token, Date.now() + 3_600_000);
    this.tokensIssued.push(token);
    return token;
  }

  /** Delivers `event` to the webhook URL, signed with the webhook secret as GitHub signs it. */
  async deliver(
    event: string,
    payload: unknown,
    o: { id?: string; signature?: string } = {},
  ): Promise<Delivery> {
    const body = JSON.stringify(payload);
    const id = o.id ?? randomUUID();
    const res = await fetch(this.webhookUrl, {
      method: "POST",
      headers: {
        "content-type": "application/json",
        "user-agent": "GitHub-Hookshot/fake",
        "x-github-event": event,
        "x-github-delivery": id,
        "x-github-hook-id": "1",
        "x-github-hook-installation-target-type": "integration",
        "x-github-hook-installation-target-id": String(this.appId),
        "x-hub-signature-256": o.signature ?? signWebhook(this.webhookSecret, body),
      },
      body,
    });
    const text = await res.text();
    const d: Delivery = { id, event, status: res.status, body: text ? JSON.parse(text) : undefined };
    this.deliveries.push(d);
    return d;
  }

  /** A push event's payload as GitHub sends it (the fields denv reads, and the usual others). */
  pushPayload(fullName: string, ref: string, before: string, after: string): Record<string, unknown> {
    const [owner, name] = fullName.split("/");
    return {
      ref,
      before,
      after,
      created: /^0+$/.test(before),
      deleted: /^0+$/.test(after),
      forced: false,
      compare: `${this.url}/${fullName}/compare/${before.slice(0, 12)}...${after.slice(0, 12)}`,
      commits: [],
      head_commit: /^0+$/.test(after)
        ? null
        : { id: after, message: "push", timestamp: new Date().toISOString() },
      repository: {
        id: 1,
        name,
        full_name: fullName,
        private: true,
        owner: { login: owner, name: owner },
        default_branch: this.repos.get(fullName.toLowerCase())?.defaultBranch ?? "main",
        clone_url: this.cloneUrl(fullName),
      },
      pusher: { name: "octocat", email: "octocat@example.invalid" },
      sender: { login: "octocat", id: 1, type: "User" },
      installation: { id: this.installationId, node_id: "MDIzOkludGVncmF0aW9uSW5zdGFsbGF0aW9uNzc3" },
    };
  }

  async close(): Promise<void> {
    await new Promise<void>((r) => this.server.close(() => r()));
    await rm(this.root, { recursive: true, force: true });
  }

  /** The app's JWT: RS256 over header.payload with the app's key, iss the app id, not expired. */
  private jwtValid(header: string | undefined): boolean {
    const m = /^Bearer ([\w-]+)\.([\w-]+)\.([\w-]+)$/.exec(header ?? "");
    if (!m) return false;
    const [, h, p, s] = m as unknown as [string, string, string, string];
    const ok = createVerify("RSA-SHA256")
      .update(`${h}.${p}`)
      .verify(this.publicKey, Buffer.from(s, "base64url"));
    if (!ok) return false;
    const head = JSON.parse(Buffer.from(h, "base64url").toString()) as { alg?: string };
    const claims = JSON.parse(Buffer.from(p, "base64url").toString()) as {
      iss?: unknown;
      iat?: number;
      exp?: number;
    };
    const now = Date.now() / 1000;
    return (
      head.alg === "RS256" &&
      String(claims.iss) === String(this.appId) &&
      typeof claims.exp === "number" &&
      typeof claims.iat === "number" &&
      claims.exp > now &&
      claims.iat <= now + 60 &&
      claims.exp - claims.iat <= 660
    );
  }

  private tokenValid(header: string | undefined): boolean {
    const m = /^(?:token|Bearer) (ghs_\w+)$/.exec(header ?? "");
    const exp = m ? this.tokens.get(m[1] as string) : undefined;
    return exp !== undefined && exp > Date.now();
  }

  private basicTokenValid(header: string | undefined): boolean {
    const m = /^Basic (.+)$/.exec(header ?? "");
    if (!m) return false;
    const [user, token] = Buffer.from(m[1] as string, "base64")
      .toString()
      .split(":");
    return user === "x-access-token" && this.tokenValid(`token ${token}`);
  }

  private async serve(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? "/", this.url);
    const path = url.pathname;
    const json = (status: number, body: unknown) => {
      res.writeHead(status, { "content-type": "application/json" });
      res.end(JSON.stringify(body));
    };
    const auth = req.headers.authorization;
    if (path === "/_fake/state" && req.method === "GET")
      return json(200, {
        deliveries: this.deliveries,
        checkRuns: this.checkRuns,
        gitRequests: this.gitRequests,
      });
    if (path === "/_fake/webhook-url" && req.method === "PUT") {
      this.webhookUrl = (await readBody(req)).toString().trim();
      return json(200, { webhookUrl: this.webhookUrl });
    }
    if (path.startsWith("/redirect/")) {
      res.writeHead(302, { location: `http://127.0.0.2:1${path.slice("/redirect".length)}${url.search}` });
      res.end();
      return;
    }
    const gitMatch = /^\/([\w.-]+\/[\w.-]+)\.git(\/.*)$/.exec(path);
    if (gitMatch)
      return this.git(req, res, gitMatch[1] as string, gitMatch[2] as string, url.search.slice(1));
    let m = /^\/repos\/([\w.-]+\/[\w.-]+)\/installation$/.exec(path);
    if (m && req.method === "GET") {
      if (!this.jwtValid(auth)) return json(401, { message: "A JSON web token could not be decoded" });
      if (!this.repos.has((m[1] as string).toLowerCase())) return json(404, { message: "Not Found" });
      return json(200, { id: this.installationId, app_id: this.appId, target_type: "Organization" });
    }
    m = /^\/app\/installations\/(\d+)\/access_tokens$/.exec(path);
    if (m && req.method === "POST") {
      if (!this.jwtValid(auth)) return json(401, { message: "A JSON web token could not be decoded" });
      if (Number(m[1]) !== this.installationId) return json(404, { message: "Not Found" });
      const token = this.issueToken();
      return json(201, {
        token,
        expires_at: new Date(Date.now() + 3_600_000).toISOString(),
        permissions: { contents: "read", checks: "write", metadata: "read" },
      });
    }
    m = /^\/repos\/([\w.-]+\/[\w.-]+)$/.exec(path);
    if (m && req.method === "GET") {
      if (!this.tokenValid(auth)) return json(401, { message: "Bad credentials" });
      const repo = this.repos.get((m[1] as string).toLowerCase());
      if (!repo) return json(404, { message: "Not Found" });
      return json(200, { full_name: m[1], default_branch: repo.defaultBranch, private: true });
    }
    m = /^\/repos\/([\w.-]+\/[\w.-]+)\/commits\/([\w.-]+)\/check-runs$/.exec(path);
    if (m && req.method === "GET") {
      if (!this.tokenValid(auth)) return json(401, { message: "Bad credentials" });
      const runs = this.checkRuns.filter((r) => r.repository === m?.[1] && r.head_sha === m?.[2]);
      return json(200, { total_count: runs.length, check_runs: runs.map(({ history: _, ...r }) => r) });
    }
    m = /^\/repos\/([\w.-]+\/[\w.-]+)\/check-runs(?:\/(\d+))?$/.exec(path);
    if (m) {
      if (!this.tokenValid(auth)) return json(401, { message: "Bad credentials" });
      const body = JSON.parse((await readBody(req)).toString() || "{}") as Partial<CheckRun>;
      if (req.method === "POST" && !m[2]) {
        if (!body.name || !body.head_sha) return json(422, { message: "name and head_sha are required" });
        const run: CheckRun = {
          ...(body as CheckRun),
          id: this.checkRuns.length + 1,
          repository: m[1] as string,
          status: body.status ?? "queued",
          history: [body.status ?? "queued"],
        };
        this.checkRuns.push(run);
        return json(201, run);
      }
      const run = this.checkRuns.find((r) => r.id === Number(m?.[2]) && r.repository === m?.[1]);
      if (req.method === "PATCH" && run) {
        if (run.status === "completed") return json(422, { message: "the check run is completed" });
        Object.assign(run, body, { history: [...run.history, body.status ?? run.status] });
        return json(200, run);
      }
      return json(404, { message: "Not Found" });
    }
    json(404, { message: "Not Found" });
  }

  /** git smart HTTP through git http-backend (CGI); a push is then delivered as a webhook. */
  private async git(
    req: IncomingMessage,
    res: ServerResponse,
    fullName: string,
    rest: string,
    query: string,
  ): Promise<void> {
    const authorized = this.basicTokenValid(req.headers.authorization);
    this.gitRequests.push({ path: `${fullName}.git${rest}`, authorized });
    if (!authorized) {
      res.writeHead(401, { "www-authenticate": 'Basic realm="GitHub"' });
      res.end();
      return;
    }
    const repoDir = join(this.root, `${fullName}.git`);
    const push = rest === "/git-receive-pack";
    const before = push ? refs(repoDir) : new Map<string, string>();
    const body = await readBody(req);
    const out = await new Promise<Buffer>((resolve, reject) => {
      const cgi = spawn("git", ["http-backend"], {
        env: {
          PATH: process.env.PATH,
          GIT_PROJECT_ROOT: this.root,
          GIT_HTTP_EXPORT_ALL: "1",
          PATH_INFO: `/${fullName}.git${rest}`,
          REQUEST_METHOD: req.method ?? "GET",
          QUERY_STRING: query,
          CONTENT_TYPE: req.headers["content-type"] ?? "",
          CONTENT_LENGTH: String(body.length),
          REMOTE_USER: "x-access-token",
          REMOTE_ADDR: "127.0.0.1",
          ...(req.headers["git-protocol"] ? { GIT_PROTOCOL: String(req.headers["git-protocol"]) } : {}),
        },
        stdio: ["pipe", "pipe", "ignore"],
      });
      const chunks: Buffer[] = [];
      cgi.stdout.on("data", (c: Buffer) => chunks.push(c));
      cgi.on("error", reject);
      cgi.on("close", () => resolve(Buffer.concat(chunks)));
      // http-backend may answer without reading the whole body (a refusal, a GET).
      cgi.stdin.on("error", () => undefined);
      cgi.stdin.end(body);
    });
    const split = out.indexOf("\r\n\r\n");
    const head = out.subarray(0, split).toString().split("\r\n");
    let status = 200;
    const headers: Record<string, string> = {};
    for (const line of head) {
      const [k, ...v] = line.split(":");
      if (!k) continue;
      if (k.toLowerCase() === "status") status = Number.parseInt(v.join(":").trim(), 10);
      else headers[k] = v.join(":").trim();
    }
    res.writeHead(status, headers);
    res.end(out.subarray(split + 4));
    if (!push) return;
    const after = refs(repoDir);
    for (const [ref, sha] of after) {
      const old = before.get(ref) ?? "0".repeat(40);
      if (old !== sha) await this.deliver("push", this.pushPayload(fullName, ref, old, sha));
    }
  }
}

function git(args: string[]): string {
  const r = spawnSync("git", args, { encoding: "utf8" });
  if (r.status !== 0) throw new Error(`git ${args.join(" ")}: ${r.stderr}`);
  return r.stdout;
}

function refs(repoDir: string): Map<string, string> {
  const out = git(["-C", repoDir, "for-each-ref", "--format=%(refname) %(objectname)"]);
  return new Map(
    out
      .split("\n")
      .filter((l) => l !== "")
      .map((l) => l.split(" ") as [string, string]),
  );
}

async function readBody(req: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  return Buffer.concat(chunks);
}
