import { createReadStream, type Stats } from "node:fs";
import { realpath, stat } from "node:fs/promises";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { ControlPlaneMessages, ErrorResponse } from "@denv/spec";
import type { FastifyReply, FastifyRequest } from "fastify";

/**
 * The dashboard's files (packages/web's build) served at `/`. They are only ever the answer to a
 * request no API route matched (the not-found handler calls `serve`), so no file can shadow a
 * route, and paths under /v1 are never served from here. The files hold no data: the page fetches
 * everything through the API with the user's own token.
 */

/** Where `npm run build` writes packages/web's build, from this file's place in packages/cp/dist. */
export const DEFAULT_WEB_DIR = fileURLToPath(new URL("../../../web/dist/", import.meta.url));

const CONTENT_TYPES: Readonly<Record<string, string>> = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".json": "application/json",
  ".map": "application/json",
  ".svg": "image/svg+xml",
  ".png": "image/png",
  ".ico": "image/x-icon",
  ".txt": "text/plain; charset=utf-8",
  ".woff2": "font/woff2",
};

/**
 * The page may load code and styles only from here and talk only to this control plane: an
 * injected script could not send a token anywhere else.
 */
const CSP =
  "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
  "font-src 'self'; manifest-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/** Paths the API owns: never answered with a file or the page. */
const API_PREFIXES = ["/v1/", "/healthz", "/metrics"];

export class WebAssets {
  readonly #root: string;
  #realRoot: Promise<string | undefined> | undefined;

  constructor(root: string) {
    this.#root = path.resolve(root);
  }

  /** Answers a GET or HEAD no route matched; false when it is not the dashboard's to answer. */
  async serve(req: FastifyRequest, reply: FastifyReply): Promise<boolean> {
    if (req.method !== "GET" && req.method !== "HEAD") return false;
    const rawPath = req.url.split("?")[0] ?? "/";
    if (rawPath === "/v1" || API_PREFIXES.some((p) => rawPath === p || rawPath.startsWith(p))) return false;
    const root = await this.#realRootDir();
    if (root === undefined) {
      notFound(reply, ControlPlaneMessages.dashboardNotBuilt);
      return true;
    }
    const rel = safeRelative(rawPath);
    if (rel === undefined) {
      notFound(reply, ControlPlaneMessages.noDashboardFile(rawPath.slice(0, 200)));
      return true;
    }
    const file = rel === "" ? undefined : await this.#file(root, rel);
    if (file !== undefined) {
      send(reply, file.path, file.stats, path.extname(file.path), rel.startsWith("assets/"));
      return true;
    }
    // A missing file with an extension is a missing file; anything else is a page of the app
    // (a deep link like /deployments/ID), answered with index.html for the app's router.
    if (path.extname(rel) !== "") {
      notFound(reply, ControlPlaneMessages.noDashboardFile(rawPath.slice(0, 200)));
      return true;
    }
    const index = await this.#file(root, "index.html");
    if (index === undefined) {
      notFound(reply, ControlPlaneMessages.dashboardNotBuilt);
      return true;
    }
    send(reply, index.path, index.stats, ".html", false);
    return true;
  }

  #realRootDir(): Promise<string | undefined> {
    this.#realRoot ??= realpath(this.#root).catch(() => undefined);
    return this.#realRoot;
  }

  /** A regular file inside the root, after symlinks are resolved; undefined otherwise. */
  async #file(root: string, rel: string): Promise<{ path: string; stats: Stats } | undefined> {
    let real: string;
    try {
      real = await realpath(path.join(root, rel));
    } catch {
      return undefined;
    }
    if (!real.startsWith(root + path.sep)) return undefined;
    const stats = await stat(real).catch(() => undefined);
    return stats?.isFile() === true ? { path: real, stats } : undefined;
  }
}

/**
 * The URL path as a path relative to the root, or undefined when it could climb out or is not a
 * plain path: `..` or `.` segments (also percent-encoded), backslashes, NUL, bad escapes.
 */
export function safeRelative(urlPath: string): string | undefined {
  let decoded: string;
  try {
    decoded = decodeURIComponent(urlPath);
  } catch {
    return undefined;
  }
  if (!decoded.startsWith("/") || /[\\\0]/.test(decoded)) return undefined;
  const segments = decoded.slice(1).split("/");
  if (segments.some((s) => s === ".." || s === ".")) return undefined;
  // Empty segments (`//`, a trailing slash) are dropped: /deployments/ and /deployments are one page.
  return segments.filter((s) => s !== "").join("/");
}

function send(reply: FastifyReply, file: string, stats: Stats, ext: string, immutable: boolean): void {
  void reply
    .code(200)
    .header("content-type", CONTENT_TYPES[ext] ?? "application/octet-stream")
    .header("content-length", String(stats.size))
    // Vite names built assets by their content hash; the page itself must be fetched fresh.
    .header("cache-control", immutable ? "public, max-age=31536000, immutable" : "no-cache")
    .header("x-content-type-options", "nosniff")
    .header("referrer-policy", "no-referrer")
    .header("content-security-policy", CSP)
    .send(createReadStream(file));
}

function notFound(reply: FastifyReply, message: string): void {
  void reply
    .code(404)
    .type("application/json")
    .send(ErrorResponse.parse({ error: { code: "not_found", message } }));
}
