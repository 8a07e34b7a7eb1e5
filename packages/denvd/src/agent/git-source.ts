import { spawn } from "node:child_process";
import { mkdir, mkdtemp, readdir, rm, stat } from "node:fs/promises";
import { join } from "node:path";
import { DenvError, GithubMessages, isSafeGitRef } from "@denv/spec";
import { type ProjectSource, receiveSource } from "./source.js";

/**
 * A deploy's source fetched from git by the host that builds it: one commit, shallow, over git
 * smart HTTP, into a bare repository under the state dir; its tree is then archived and taken
 * through the same path as an uploaded tar (the special-file guard, then `tar`), so a hostile
 * repository is just another upload. The repository is removed once archived.
 *
 * What git may do is pinned down: http(s) only (GIT_ALLOW_PROTOCOL; no file://, ssh, ext::),
 * no credentials in the URL, no redirects, no credential helpers or prompts, no system or user
 * config, no hooks, objects checked as they arrive, a size limit enforced while it fetches.
 */

export interface GitSourceRequest {
  url: string;
  ref: string;
  authorization?: string | undefined;
  maxBytes?: number | undefined;
}

export interface GitSource extends ProjectSource {
  commit: string;
  fetchedBytes: number;
}

const DEFAULT_MAX_BYTES = 1024 ** 3;
const SIZE_POLL_MS = 100;

/** The URL as git will get it, or a refusal naming it. */
export function checkGitUrl(url: string): URL {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    throw new DenvError("invalid_request", GithubMessages.badGitUrl(url));
  }
  if ((u.protocol !== "https:" && u.protocol !== "http:") || u.username !== "" || u.password !== "")
    throw new DenvError("invalid_request", GithubMessages.badGitUrl(url));
  return u;
}

export async function fetchGitSource(
  req: GitSourceRequest,
  tmpRoot: string,
  signal: AbortSignal,
): Promise<GitSource> {
  const url = checkGitUrl(req.url);
  if (!isSafeGitRef(req.ref))
    throw new DenvError("invalid_request", `refused git ref ${JSON.stringify(req.ref)}`);
  const maxBytes = req.maxBytes ?? DEFAULT_MAX_BYTES;
  await mkdir(tmpRoot, { recursive: true, mode: 0o700 });
  const work = await mkdtemp(join(tmpRoot, "git-"));
  try {
    const repo = join(work, "repo.git");
    const env = gitEnv(work, url.protocol.slice(0, -1), req.authorization);
    await git(["init", "--bare", "-q", repo], env, signal);
    const fetched = await git(
      ["-C", repo, "fetch", "--depth=1", "--no-tags", "--quiet", url.href, req.ref],
      env,
      signal,
      { watchDir: repo, maxBytes },
    ).catch((err: unknown) => {
      if (err instanceof GitFailure && /redirect|returned error: 30[1-8]\b/i.test(err.stderr))
        throw new DenvError("invalid_request", GithubMessages.redirected(url.href));
      throw err;
    });
    void fetched;
    const commit = (
      await git(["-C", repo, "rev-parse", "--verify", "FETCH_HEAD^{commit}"], env, signal)
    ).trim();
    const fetchedBytes = await dirBytes(repo);
    const child = spawn("git", ["-C", repo, "archive", "--format=tar", commit], {
      env,
      stdio: ["ignore", "pipe", "pipe"],
      signal,
    });
    const stderr: Buffer[] = [];
    child.stderr.on("data", (b: Buffer) => stderr.push(b));
    const exited = new Promise<number>((resolve) => child.on("close", (code) => resolve(code ?? 128)));
    child.on("error", () => undefined);
    const source = await receiveSource(child.stdout, tmpRoot);
    const code = await exited;
    if (code !== 0) {
      await source[Symbol.asyncDispose]();
      throw new DenvError(
        "invalid_request",
        `git archive of ${commit} failed: ${Buffer.concat(stderr).toString().trim()}`,
      );
    }
    return { ...source, commit, fetchedBytes };
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}

/** The environment git runs in: nothing of denvd's own, nothing of the machine's git config. */
function gitEnv(home: string, scheme: string, authorization: string | undefined): NodeJS.ProcessEnv {
  const config: Array<[string, string]> = [
    ["http.followRedirects", "false"],
    ["credential.helper", ""],
    ["core.hooksPath", "/dev/null"],
    ["transfer.fsckObjects", "true"],
    ["protocol.version", "2"],
    ["protocol.allow", "never"],
    [`protocol.${scheme}.allow`, "always"],
  ];
  if (authorization) config.push(["http.extraHeader", `Authorization: ${authorization}`]);
  const env: NodeJS.ProcessEnv = {
    PATH: process.env.PATH ?? "/usr/bin:/bin",
    HOME: home,
    GIT_CONFIG_NOSYSTEM: "1",
    GIT_CONFIG_GLOBAL: "/dev/null",
    GIT_TERMINAL_PROMPT: "0",
    GIT_ASKPASS: "/bin/false",
    GIT_ALLOW_PROTOCOL: scheme,
    GIT_CONFIG_COUNT: String(config.length),
  };
  config.forEach(([k, v], i) => {
    env[`GIT_CONFIG_KEY_${i}`] = k;
    env[`GIT_CONFIG_VALUE_${i}`] = v;
  });
  return env;
}

class GitFailure extends DenvError {
  constructor(
    args: string[],
    readonly stderr: string,
  ) {
    // The URL is in the arguments; the authorization header never is (it is in the environment).
    super(
      "invalid_request",
      `git ${args.filter((a) => !a.startsWith("/")).join(" ")} failed: ${lastLine(stderr)}`,
    );
  }
}

function lastLine(s: string): string {
  const lines = s
    .trim()
    .split("\n")
    .filter((l) => l.trim() !== "");
  return lines.at(-1)?.trim() ?? "no output";
}

function git(
  args: string[],
  env: NodeJS.ProcessEnv,
  signal: AbortSignal,
  limit?: { watchDir: string; maxBytes: number },
): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn("git", args, { env, stdio: ["ignore", "pipe", "pipe"], signal });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    child.stdout.on("data", (b: Buffer) => out.push(b));
    child.stderr.on("data", (b: Buffer) => err.push(b));
    let tooLarge = false;
    let polling = false;
    const poll = limit
      ? setInterval(() => {
          if (polling) return;
          polling = true;
          void dirBytes(limit.watchDir)
            .then((n) => {
              if (n > limit.maxBytes && !tooLarge) {
                tooLarge = true;
                child.kill("SIGKILL");
              }
            })
            .finally(() => {
              polling = false;
            });
        }, SIZE_POLL_MS)
      : undefined;
    child.on("error", (e) => {
      clearInterval(poll);
      reject(signal.aborted ? e : new DenvError("internal", `cannot run git: ${e.message}`));
    });
    child.on("close", async (code) => {
      clearInterval(poll);
      if (limit && !tooLarge && (await dirBytes(limit.watchDir)) > limit.maxBytes) tooLarge = true;
      if (tooLarge)
        return reject(new DenvError("invalid_request", GithubMessages.tooLarge(limit?.maxBytes ?? 0)));
      if (code !== 0) return reject(new GitFailure(args, Buffer.concat(err).toString("utf8")));
      resolve(Buffer.concat(out).toString("utf8"));
    });
  });
}

/** Bytes under `dir` (git's objects and packs while they arrive). */
async function dirBytes(dir: string): Promise<number> {
  let total = 0;
  let entries: import("node:fs").Dirent[];
  try {
    entries = await readdir(dir, { withFileTypes: true });
  } catch {
    return 0;
  }
  for (const e of entries) {
    const p = join(dir, e.name);
    if (e.isDirectory()) total += await dirBytes(p);
    else
      total += await stat(p).then(
        (s) => s.size,
        () => 0,
      );
  }
  return total;
}
