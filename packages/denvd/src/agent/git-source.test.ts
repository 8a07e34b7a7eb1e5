import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { GithubMessages } from "@denv/spec";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { fetchGitSource } from "./git-source.js";

/**
 * The host's git fetch against a real repository served over smart HTTP on loopback (Debian's
 * git http-backend behind a small server that wants a token, as GitHub does): one commit, with
 * the authorization it was given; what git must not do (other transports, credentials in URLs,
 * redirects, oversized repositories, option-like refs) is refused with its line.
 */
describe("fetchGitSource", () => {
  let root: string;
  let server: Server;
  let url: string;
  let head: string;
  const auth = `Basic ${Buffer.from("x-access-token:ghs_test").toString("base64")}`;
  const git = (args: string[], cwd?: string) => {
    const r = spawnSync("git", args, {
      cwd,
      encoding: "utf8",
      env: {
        ...process.env,
        GIT_CONFIG_GLOBAL: "/dev/null",
        GIT_AUTHOR_NAME: "t",
        GIT_AUTHOR_EMAIL: "t@example.invalid",
        GIT_COMMITTER_NAME: "t",
        GIT_COMMITTER_EMAIL: "t@example.invalid",
      },
    });
    if (r.status !== 0) throw new Error(r.stderr);
    return r.stdout.trim();
  };

  beforeAll(async () => {
    root = mkdtempSync(join(tmpdir(), "denv-git-source-"));
    const work = join(root, "work");
    git(["init", "-q", "--initial-branch=main", work]);
    writeFileSync(join(work, "compose.yaml"), "services:\n  main:\n    image: debian:12\n");
    writeFileSync(
      join(work, "big.bin"),
      Buffer.alloc(256 * 1024, 7).map((_, i) => (i * 2654435761) >>> 24),
    );
    git(["add", "-A"], work);
    git(["commit", "-qm", "one"], work);
    head = git(["rev-parse", "HEAD"], work);
    git(["clone", "-q", "--bare", work, join(root, "repo.git")]);
    server = createServer((req, res) => {
      const u = new URL(req.url ?? "/", "http://x");
      if (u.pathname.startsWith("/moved/")) {
        res.writeHead(301, { location: `http://127.0.0.2:9${u.pathname.slice(6)}${u.search}` });
        return res.end();
      }
      if (req.headers.authorization !== auth) {
        res.writeHead(401, { "www-authenticate": 'Basic realm="test"' });
        return res.end();
      }
      const chunks: Buffer[] = [];
      req.on("data", (c: Buffer) => chunks.push(c));
      req.on("end", () => {
        const cgi = spawn("git", ["http-backend"], {
          env: {
            PATH: process.env.PATH,
            GIT_PROJECT_ROOT: root,
            GIT_HTTP_EXPORT_ALL: "1",
            PATH_INFO: u.pathname,
            QUERY_STRING: u.search.slice(1),
            REQUEST_METHOD: req.method ?? "GET",
            CONTENT_TYPE: req.headers["content-type"] ?? "",
            ...(req.headers["git-protocol"] ? { GIT_PROTOCOL: String(req.headers["git-protocol"]) } : {}),
          },
        });
        const out: Buffer[] = [];
        cgi.stdout.on("data", (c: Buffer) => out.push(c));
        cgi.on("close", () => {
          const all = Buffer.concat(out);
          const split = all.indexOf("\r\n\r\n");
          const headers: Record<string, string> = {};
          let status = 200;
          for (const line of all.subarray(0, split).toString().split("\r\n")) {
            const [k, ...v] = line.split(":");
            if (!k) continue;
            if (k.toLowerCase() === "status") status = Number.parseInt(v.join(":"), 10);
            else headers[k] = v.join(":").trim();
          }
          res.writeHead(status, headers);
          res.end(all.subarray(split + 4));
        });
        // http-backend may answer without reading the whole body (a refusal).
        cgi.stdin.on("error", () => undefined);
        cgi.stdin.end(Buffer.concat(chunks));
      });
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    const a = server.address();
    url = `http://127.0.0.1:${typeof a === "object" && a ? a.port : 0}/repo.git`;
  });
  afterAll(async () => {
    await new Promise<void>((r) => server.close(() => r()));
    rmSync(root, { recursive: true, force: true });
  });

  const signal = () => AbortSignal.timeout(60_000);
  const tmp = () => join(root, "tmp");

  it("fetches one commit (by id or by branch) with the authorization and takes its tree as an upload", async () => {
    for (const ref of [head, "main"]) {
      await using src = await fetchGitSource({ url, ref, authorization: auth }, tmp(), signal());
      expect(src.commit).toBe(head);
      expect(src.entries).toBe(2);
      expect(readFileSync(join(src.dir, "compose.yaml"), "utf8")).toContain("debian:12");
    }
    await expect(fetchGitSource({ url, ref: "main" }, tmp(), signal())).rejects.toThrow(
      /git .*fetch .* failed/,
    );
  });

  it("refuses other transports, credentials in the URL, redirects, oversized repositories and option-like refs", async () => {
    const refused = async (req: Parameters<typeof fetchGitSource>[0]) =>
      (await fetchGitSource(req, tmp(), signal()).then(
        () => "fetched",
        (e: Error) => e.message,
      )) as string;
    for (const bad of [
      `file://${root}/repo.git`,
      "ssh://git@127.0.0.1/repo.git",
      "ext::sh -c touch% /tmp/pwned",
      "git://127.0.0.1/repo.git",
    ])
      expect(await refused({ url: bad, ref: "main" })).toBe(GithubMessages.badGitUrl(bad));
    const withCreds = url.replace("http://", "http://x-access-token:ghs_test@");
    expect(await refused({ url: withCreds, ref: "main" })).toBe(GithubMessages.badGitUrl(withCreds));
    const moved = url.replace("/repo.git", "/moved/repo.git");
    expect(await refused({ url: moved, ref: "main", authorization: auth })).toBe(
      GithubMessages.redirected(moved),
    );
    expect(await refused({ url, ref: "main", authorization: auth, maxBytes: 10_000 })).toBe(
      GithubMessages.tooLarge(10_000),
    );
    for (const ref of ["--upload-pack=touch /tmp/pwned", "main..other", "a b"])
      expect(await refused({ url, ref, authorization: auth })).toMatch(/^refused git ref/);
  });
});
