import { createSign } from "node:crypto";
import { DenvError } from "@denv/spec";

/**
 * The GitHub App's side of GitHub's REST API, over fetch: the app's JWT (RS256, signed with its
 * private key), installation tokens (cached until shortly before they expire), repositories and
 * check runs. `apiUrl` is https://api.github.com or a GitHub Enterprise Server's /api/v3.
 */

export interface GithubAppOptions {
  appId: number;
  privateKeyPem: string;
  apiUrl: string;
  /** For tests of expiry; default Date.now. */
  now?: () => number;
}

export interface CheckRunOutput {
  title: string;
  summary: string;
  text?: string;
}

export interface CheckRunUpdate {
  status?: "queued" | "in_progress" | "completed";
  conclusion?: "success" | "failure" | "cancelled" | "neutral";
  started_at?: string;
  completed_at?: string;
  details_url?: string;
  output?: CheckRunOutput;
}

/** A token is refreshed this long before GitHub says it expires. */
const TOKEN_MARGIN_MS = 5 * 60_000;

export class GithubApp {
  private tokens = new Map<number, { token: string; expiresAt: number }>();
  private readonly now: () => number;

  constructor(private readonly o: GithubAppOptions) {
    this.now = o.now ?? Date.now;
  }

  /** The app's JWT: iat a minute back (clock drift), exp nine minutes on (GitHub allows ten). */
  jwt(): string {
    const iat = Math.floor(this.now() / 1000) - 60;
    const b64 = (v: unknown) => Buffer.from(JSON.stringify(v)).toString("base64url");
    const unsigned = `${b64({ alg: "RS256", typ: "JWT" })}.${b64({ iat, exp: iat + 600, iss: String(this.o.appId) })}`;
    const sig = createSign("RSA-SHA256").update(unsigned).sign(this.o.privateKeyPem).toString("base64url");
    return `${unsigned}.${sig}`;
  }

  /** GET /repos/{owner}/{repo}/installation: the app's installation on it, if any. */
  async repositoryInstallation(repository: string): Promise<number | undefined> {
    const r = await this.call("GET", `/repos/${repository}/installation`, {
      bearer: this.jwt(),
      allow404: true,
    });
    return r === undefined ? undefined : Number((r as { id: number }).id);
  }

  /** POST /app/installations/{id}/access_tokens, cached until five minutes before expiry. */
  async installationToken(installationId: number): Promise<string> {
    const cached = this.tokens.get(installationId);
    if (cached && cached.expiresAt - TOKEN_MARGIN_MS > this.now()) return cached.token;
    const r = (await this.call("POST", `/app/installations/${installationId}/access_tokens`, {
      bearer: this.jwt(),
    })) as { token: string; expires_at: string };
    const expiresAt = Date.parse(r.expires_at);
    if (typeof r.token !== "string" || Number.isNaN(expiresAt))
      throw new DenvError("internal", "GitHub answered an installation token without token or expires_at");
    this.tokens.set(installationId, { token: r.token, expiresAt });
    return r.token;
  }

  /** GET /repos/{owner}/{repo}: its default branch. */
  async defaultBranch(repository: string, installationId: number): Promise<string> {
    const r = (await this.call("GET", `/repos/${repository}`, {
      token: await this.installationToken(installationId),
    })) as { default_branch?: string };
    return r.default_branch ?? "main";
  }

  async createCheckRun(
    repository: string,
    installationId: number,
    body: CheckRunUpdate & { name: string; head_sha: string; external_id?: string },
  ): Promise<number> {
    const r = (await this.call("POST", `/repos/${repository}/check-runs`, {
      token: await this.installationToken(installationId),
      body,
    })) as { id: number };
    return Number(r.id);
  }

  async updateCheckRun(
    repository: string,
    installationId: number,
    checkRunId: number,
    body: CheckRunUpdate,
  ): Promise<void> {
    await this.call("PATCH", `/repos/${repository}/check-runs/${checkRunId}`, {
      token: await this.installationToken(installationId),
      body,
    });
  }

  private async call(
    method: string,
    path: string,
    o: { bearer?: string; token?: string; body?: unknown; allow404?: boolean },
  ): Promise<unknown> {
    const res = await fetch(`${this.o.apiUrl.replace(/\/$/, "")}${path}`, {
      method,
      redirect: "error",
      headers: {
        accept: "application/vnd.github+json",
        "x-github-api-version": "2022-11-28",
        "user-agent": "denv-cp",
        authorization: o.bearer ? `Bearer ${o.bearer}` : `token ${o.token}`,
        ...(o.body ? { "content-type": "application/json" } : {}),
      },
      ...(o.body ? { body: JSON.stringify(o.body) } : {}),
      signal: AbortSignal.timeout(30_000),
    });
    if (o.allow404 && res.status === 404) return undefined;
    const text = await res.text();
    if (!res.ok)
      throw new DenvError(
        "internal",
        `GitHub answered ${method} ${path} with ${res.status}: ${text.slice(0, 200).replace(/\s+/g, " ")}`,
      );
    return text === "" ? {} : JSON.parse(text);
  }
}

/** git's HTTP authorization for an installation token (GitHub's x-access-token user). */
export function gitAuthorization(token: string): string {
  return `Basic ${Buffer.from(`x-access-token:${token}`).toString("base64")}`;
}
