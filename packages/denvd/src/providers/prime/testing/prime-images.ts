import { randomBytes } from "node:crypto";
import { Readable } from "node:stream";
import { buffer } from "node:stream/consumers";
import { gunzipSync } from "node:zlib";
import tar from "tar-stream";
import type { DoubleDocker } from "../../testing/double-docker.js";
import { ApiError } from "./prime-api-error.js";

export type BuildStatus = "PENDING" | "UPLOADING" | "BUILDING" | "COMPLETED" | "FAILED" | "CANCELLED";

export interface ImageBuild {
  id: string;
  name: string;
  tag: string;
  /** The caller's user id, or `team-<id>` for a team's image: the reference's first part. */
  namespace: string;
  teamId: string | null;
  dockerfilePath: string;
  visibility: "PRIVATE" | "PUBLIC";
  status: BuildStatus;
  errorMessage: string | null;
  createdAt: string;
  startedAt: string | null;
  completedAt: string | null;
  /** The upload URL's secret, and when the URL stops taking the context (ms since the epoch). */
  uploadToken: string;
  uploadExpires: number;
  context?: Buffer;
  /** The image on the local engine once built. */
  image?: string;
  sizeBytes: number | null;
}

export interface ImageEnv {
  docker: DoubleDocker;
  serverId: string;
  /** The id Prime knows the API key's user by: personal images live under it. */
  userId: string;
  /** The presigned-style URL a build's context is PUT to. */
  uploadUrl(buildId: string, token: string): string;
  /** The network RUN steps get: "none" (reach nothing), or "default" (the engine's, as Prime's builder). */
  buildNetwork: "none" | "default";
}

/** How long an upload URL takes the context (Prime answers `expires_in` in seconds). */
const UPLOAD_TTL_S = 3600;
/** The builder's last lines a FAILED build reports as its errorMessage. */
const ERROR_LINES = 8;
/** Docker's repository-name component alphabet; Prime's CLI also refuses any `/`. */
const NAME = /^[a-z0-9]+(?:[._-][a-z0-9]+)*$/;
const TAG = /^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$/;

function now(): string {
  return new Date().toISOString();
}

/**
 * Prime's image builds (https://docs.primeintellect.ai/sandboxes/images) as the CLI's
 * `prime images push` and the SDK's ImageClient drive them: POST /images/build answers a build
 * id and an upload URL; the context (a tar.gz) is PUT there as application/octet-stream, as to
 * the real presigned storage URL; POST /images/build/{id}/start builds it, PENDING → BUILDING →
 * COMPLETED or FAILED (with the builder's last lines); `<user id>/<name>:<tag>` (or
 * `team-<team id>/…`) then starts sandboxes. Builds run `docker build` on the local engine, with
 * no network unless the double was started with `buildNetwork: "default"` (a Dockerfile that
 * installs packages), and never pull: every FROM must be on the engine already (or an earlier stage).
 */
export class Images {
  readonly builds = new Map<string, ImageBuild>();
  private readonly running = new Set<Promise<void>>();

  constructor(private readonly env: ImageEnv) {}

  get(id: string): ImageBuild {
    const b = this.builds.get(id);
    if (!b) throw new ApiError(404, `Build ${id} not found`);
    return b;
  }

  /** POST /images/build: a Dockerfile build waiting for its context. */
  initiate(body: Record<string, unknown>): object {
    if (body.source_image !== undefined)
      throw new ApiError(400, "the double builds from Dockerfiles only (no source_image)");
    const name = body.image_name;
    const tag = body.image_tag ?? "latest";
    if (typeof name !== "string" || !NAME.test(name))
      throw new ApiError(
        422,
        `image_name must be lower-case letters, digits and . _ - (got ${String(name)})`,
      );
    if (typeof tag !== "string" || !TAG.test(tag))
      throw new ApiError(422, `invalid image_tag ${String(tag)}`);
    // Accepted as Prime does; the double builds for the engine's own platform.
    if (![undefined, "linux/amd64", "linux/arm64"].includes(body.platform as string | undefined))
      throw new ApiError(422, "platform must be linux/amd64 or linux/arm64");
    const teamId = typeof body.team_id === "string" ? body.team_id : null;
    const b: ImageBuild = {
      id: randomBytes(12).toString("hex"),
      name,
      tag,
      namespace: teamId ? `team-${teamId}` : this.env.userId,
      teamId,
      dockerfilePath: typeof body.dockerfile_path === "string" ? body.dockerfile_path : "Dockerfile",
      visibility: body.visibility === "PUBLIC" ? "PUBLIC" : "PRIVATE",
      status: "PENDING",
      errorMessage: null,
      createdAt: now(),
      startedAt: null,
      completedAt: null,
      uploadToken: randomBytes(16).toString("hex"),
      uploadExpires: Date.now() + UPLOAD_TTL_S * 1000,
      sizeBytes: null,
    };
    this.builds.set(b.id, b);
    return {
      build_id: b.id,
      buildIds: [b.id],
      upload_url: this.env.uploadUrl(b.id, b.uploadToken),
      expires_in: UPLOAD_TTL_S,
      fullImagePath: reference(b),
      visibility: b.visibility,
    };
  }

  /** PUT to the upload URL: the signed content type only, until the URL expires, before start. */
  upload(id: string, token: string | null, contentType: string | undefined, data: Buffer): void {
    const b = this.builds.get(id);
    if (!b || token !== b.uploadToken || Date.now() > b.uploadExpires)
      throw new ApiError(403, "the upload URL is invalid or expired");
    if (contentType !== "application/octet-stream")
      throw new ApiError(403, "the upload URL was signed for Content-Type application/octet-stream");
    if (b.status !== "PENDING") throw new ApiError(409, `Build ${id} is ${b.status}`);
    b.context = data;
  }

  /** POST /images/build/{id}/start: the build runs in the background. */
  start(id: string, body: Record<string, unknown>): object {
    const b = this.get(id);
    if (body.context_uploaded === false || !b.context)
      throw new ApiError(400, `Build ${id}: the build context has not been uploaded`);
    if (b.status !== "PENDING") throw new ApiError(409, `Build ${id} is already ${b.status}`);
    const running = this.build(b).finally(() => this.running.delete(running));
    this.running.add(running);
    return this.status(id);
  }

  private async build(b: ImageBuild): Promise<void> {
    const context = b.context as Buffer;
    const lines: string[] = [];
    const tag = `denv-prime-${this.env.serverId}-image:${b.id}`;
    try {
      await this.refuseMissingBases(context, b.dockerfilePath);
      b.status = "BUILDING";
      b.startedAt = now();
      await this.env.docker.docker.images.build(
        Readable.from(context),
        {
          tag,
          dockerfile: b.dockerfilePath,
          args: {},
          // RUN steps reach nothing unless asked: a test's traffic stays on this machine.
          network: this.env.buildNetwork,
          labels: { ...this.env.docker.labels, "ai.denv.prime.build": b.id },
        },
        (line) => lines.push(...line.split("\n").filter((l) => l.trim() !== "")),
      );
      b.image = tag;
      b.sizeBytes = (await this.env.docker.docker.images.info(tag))?.size ?? null;
      b.status = "COMPLETED";
    } catch (e) {
      // The engine's own words come first in the client's error, the log's tail after them.
      const cause = (e instanceof Error ? e.message : String(e)).split("\n")[0] ?? "";
      b.errorMessage = [...lines.slice(-ERROR_LINES), cause.replace(/^build \S+ failed: /, "")].join("\n");
      b.status = "FAILED";
    }
    b.completedAt = now();
    delete b.context;
  }

  /** The classic builder pulls a missing FROM; the double has no registry, so it refuses one. */
  private async refuseMissingBases(context: Buffer, dockerfilePath: string): Promise<void> {
    const text = await fileOf(context, dockerfilePath);
    if (text === undefined) throw new Error(`Dockerfile ${dockerfilePath} not found in the build context`);
    const stages = new Set<string>();
    for (const m of text.matchAll(/^\s*FROM\s+(?:--\S+\s+)*(\S+)(?:\s+AS\s+(\S+))?/gim)) {
      const [, ref = "", alias] = m;
      if (ref !== "scratch" && !stages.has(ref.toLowerCase()) && !(await this.env.docker.hasImage(ref)))
        throw new Error(`base image ${ref} is not on the engine (the Prime double never pulls)`);
      if (alias) stages.add(alias.toLowerCase());
    }
  }

  /** GET /images/build/{id}: the build group and its one artifact. */
  status(id: string): object {
    const b = this.get(id);
    const times = { createdAt: b.createdAt, startedAt: b.startedAt, completedAt: b.completedAt };
    return {
      id: b.id,
      imageName: b.name,
      imageTag: b.tag,
      status: b.status,
      ...times,
      artifacts: [
        {
          id: b.id,
          status: b.status,
          artifactType: "VM_SANDBOX",
          fullImagePath: reference(b),
          errorMessage: b.errorMessage,
          ...times,
        },
      ],
    };
  }

  /** GET /images: the newest build of each image, a team's with `teamId`, newest first. */
  list(q: URLSearchParams): object {
    const offset = Math.max(0, Number(q.get("offset") ?? 0));
    const limit = Math.min(250, Math.max(1, Number(q.get("limit") ?? 100)));
    const teamId = q.get("teamId");
    const search = q.get("search");
    const newest = new Map<string, ImageBuild>();
    for (const b of this.builds.values()) newest.set(reference(b), b);
    const rows = [...newest.values()]
      .filter((b) => (teamId ? b.teamId === teamId : true))
      .filter((b) => !search || b.name.includes(search))
      .reverse();
    const data = rows.slice(offset, offset + limit).map((b) => ({
      id: b.id,
      artifactType: "VM_SANDBOX",
      imageName: b.name,
      imageTag: b.tag,
      status: b.status,
      fullImagePath: reference(b),
      errorMessage: b.errorMessage,
      sizeBytes: b.sizeBytes,
      visibility: b.visibility,
      createdAt: b.createdAt,
      startedAt: b.startedAt,
      completedAt: b.completedAt,
      pushedAt: b.status === "COMPLETED" ? b.completedAt : null,
      teamId: b.teamId,
      ownerType: b.teamId ? "team" : "personal",
      displayRef: reference(b),
    }));
    return { data, totalCount: rows.length, offset, limit };
  }

  /** The local image a sandbox's `docker_image` stands for: the newest COMPLETED build of it. */
  local(ref: string): string | undefined {
    let image: string | undefined;
    for (const b of this.builds.values()) if (b.image && reference(b) === ref) image = b.image;
    return image;
  }

  /** Waits for builds under way (their images would escape close()'s sweep). */
  async settle(): Promise<void> {
    await Promise.allSettled([...this.running]);
  }
}

function reference(b: ImageBuild): string {
  return `${b.namespace}/${b.name}:${b.tag}`;
}

/** One file of a (gzipped) tar, as text; paths compare without a leading `./`. */
async function fileOf(archive: Buffer, path: string): Promise<string | undefined> {
  const plain = archive[0] === 0x1f && archive[1] === 0x8b ? gunzipSync(archive) : archive;
  const want = path.replace(/^(\.\/)+/, "");
  const extract = tar.extract();
  let found: string | undefined;
  const done = new Promise<void>((resolve, reject) => {
    extract.on("entry", (header, stream, next) => {
      void buffer(stream).then((data) => {
        if (header.type === "file" && header.name.replace(/^(\.\/)+/, "") === want) found = data.toString();
        next();
      }, reject);
    });
    extract.on("finish", resolve);
    extract.on("error", reject);
  });
  extract.end(plain);
  await done;
  return found;
}
