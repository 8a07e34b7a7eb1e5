import { spawn } from "node:child_process";
import { buffer } from "node:stream/consumers";
import { setTimeout as sleep } from "node:timers/promises";
import { gzipSync } from "node:zlib";
import { type PrimeApi, PrimeApiError } from "./prime-api.js";
import { PrimeBuildInitiated, PrimeBuildStatus, type PrimeImage, PrimeImageList } from "./prime-schemas.js";

export type { PrimeImage } from "./prime-schemas.js";

export interface BuildImage {
  /** Lower-case letters, digits and `._-`; no `/` (Prime puts the owner in front). */
  name: string;
  tag?: string;
  /** The build context: a tar (gzipped or not), or a directory to pack whole. */
  context: Buffer | string;
  /** The Dockerfile's path inside the context. */
  dockerfile?: string;
  platform?: "linux/amd64" | "linux/arm64";
  /** Builds a team's image (`team-<id>/<name>:<tag>`) instead of the key's user's. */
  teamId?: string;
}

export interface BuildWait {
  /** Aborting stops the waiting only: Prime's API has no route that cancels a build. */
  signal?: AbortSignal;
  /** How long the build may take once started (default 30 minutes). */
  timeoutMs?: number;
}

/** Statuses a build does not leave. */
const FAILED = new Set(["FAILED", "CANCELLED"]);

/**
 * Prime's image builds (https://docs.primeintellect.ai/sandboxes/images), as `prime images push`
 * makes them: POST /images/build answers a build id and a presigned upload URL, the context goes
 * there as a tar.gz (PUT, application/octet-stream: the content type the URL was signed for),
 * POST /images/build/{id}/start builds it in Prime's cloud; the reference POST /images/build
 * answered (`<user id>/<name>:<tag>`, `team-<team id>/…` for a team) starts sandboxes once the
 * build is COMPLETED.
 */
export class PrimeImages {
  constructor(private readonly api: PrimeApi) {}

  /** Builds the image and waits for it; resolves with the reference sandboxes start from. */
  async buildImage(r: BuildImage, o: BuildWait = {}): Promise<string> {
    const archive = await gzipped(r.context);
    const tag = r.tag ?? "latest";
    const build = await this.api.call(
      "buildImage",
      "POST",
      "/images/build",
      PrimeBuildInitiated,
      {
        image_name: r.name,
        image_tag: tag,
        dockerfile_path: r.dockerfile ?? "Dockerfile",
        platform: r.platform ?? "linux/amd64",
        team_id: r.teamId,
      },
      o.signal,
    );
    const what = `build ${build.id} of ${r.name}:${tag}`;
    if (!build.uploadUrl) throw new PrimeApiError("buildImage", 0, `${what}: Prime gave no upload URL`);
    await upload(build.uploadUrl, archive, what, o.signal);
    const path = `/images/build/${encodeURIComponent(build.id)}`;
    const body = { context_uploaded: true };
    await this.api.call("buildImage", "POST", `${path}/start`, undefined, body, o.signal);
    const timeoutMs = o.timeoutMs ?? 30 * 60_000;
    const deadline = Date.now() + timeoutMs;
    for (let delay = 500; ; delay = Math.min(delay * 1.5, 5_000)) {
      const s = await this.api.call("buildImage", "GET", path, PrimeBuildStatus, undefined, o.signal);
      if (s.status === "COMPLETED") return s.reference ?? build.reference;
      if (FAILED.has(s.status))
        throw new PrimeApiError("buildImage", 0, `${what} ${s.status}: ${lastLine(s.error)}`);
      if (Date.now() + delay > deadline)
        throw new PrimeApiError("buildImage", 0, `${what} still ${s.status} after ${timeoutMs} ms`);
      await sleep(delay, undefined, o.signal ? { signal: o.signal } : {});
    }
  }

  /** The key's user's images (a team's with `teamId`), each with its newest build's status. */
  async listImages(q: { teamId?: string; search?: string } = {}): Promise<PrimeImage[]> {
    const params = new URLSearchParams({ offset: "0", limit: "250" });
    if (q.teamId) params.set("teamId", q.teamId);
    if (q.search) params.set("search", q.search);
    return (await this.api.call("listImages", "GET", `/images?${params}`, PrimeImageList)).data;
  }
}

/** The context as Prime's builder takes it: a tar.gz (a directory is packed with tar(1)). */
async function gzipped(context: Buffer | string): Promise<Buffer> {
  if (typeof context !== "string")
    return context[0] === 0x1f && context[1] === 0x8b ? context : gzipSync(context);
  const child = spawn("tar", ["-C", context, "-czf", "-", "."], { stdio: ["ignore", "pipe", "pipe"] });
  const [out, err, code] = await Promise.all([
    buffer(child.stdout),
    buffer(child.stderr),
    new Promise<number>((resolve, reject) => {
      child.on("error", reject);
      child.on("close", (c) => resolve(c ?? 1));
    }),
  ]);
  if (code !== 0)
    throw new PrimeApiError("buildImage", 0, `cannot pack ${context}: ${lastLine(err.toString())}`);
  return out;
}

async function upload(url: string, archive: Buffer, what: string, signal?: AbortSignal): Promise<void> {
  let res: Response;
  try {
    res = await fetch(url, {
      method: "PUT",
      headers: { "content-type": "application/octet-stream" },
      body: archive,
      ...(signal ? { signal } : {}),
    });
  } catch (e) {
    if (signal?.aborted) throw e;
    throw new PrimeApiError("buildImage", 0, `${what}: uploading the context: ${String(e)}`);
  }
  if (!res.ok)
    throw new PrimeApiError("buildImage", res.status, `${what}: uploading the context: ${await res.text()}`);
}

/** The last non-empty line of Prime's text: a builder's error comes after its log. */
function lastLine(text: string | undefined): string {
  const lines = (text ?? "").split("\n").filter((l) => l.trim() !== "");
  return lines.at(-1)?.trim() ?? "(Prime gave no reason)";
}
