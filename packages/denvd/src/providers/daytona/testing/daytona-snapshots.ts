import { randomUUID } from "node:crypto";
import { ApiError } from "./daytona-api-error.js";
import { BuildLog, buildImage } from "./daytona-build.js";
import type { DaytonaDocker } from "./daytona-docker.js";
import type { ObjectStorage } from "./daytona-object-storage.js";

/** The api-client's SnapshotState values this double goes through. */
export type SnapshotState = "pending" | "building" | "active" | "error" | "build_failed";

export interface Snapshot {
  id: string;
  name: string;
  /** The local image a sandbox of this snapshot runs. */
  image: string;
  imageName?: string;
  state: SnapshotState;
  errorReason: string | null;
  buildInfo?: { dockerfileContent: string; contextHashes: string[] };
  cpu: number;
  memory: number;
  disk: number;
  entrypoint: string[] | null;
  /** The sandbox user a commit was made as (a sandbox of it runs as that user by default). */
  user?: string;
  sourceSandboxId: string | null;
  createdAt: Date;
  updatedAt: Date;
  log: BuildLog;
}

/**
 * Daytona's snapshots (POST/GET/DELETE /snapshots): an image reference taken as it is (local,
 * never pulled), a build of the SDK's Dockerfile and context, or a commit of a sandbox.
 * Builds run in the background; the SDK polls the state (pending -> building -> active, or
 * build_failed with `errorReason`) and may follow the build log.
 */
export class Snapshots {
  private readonly all = new Map<string, Snapshot>();
  private readonly running = new Set<Promise<unknown>>();

  constructor(
    private readonly o: {
      docker: DaytonaDocker;
      storage: ObjectStorage;
      organizationId: string;
      /** The image repository prefix of this double's builds and commits. */
      repo: string;
    },
  ) {}

  /** POST /snapshots (CreateSnapshot). */
  async create(body: Record<string, unknown>): Promise<Snapshot> {
    const name = body.name;
    if (typeof name !== "string" || name === "") throw new ApiError(400, "name is required");
    if (this.find(name)) throw new ApiError(409, `Snapshot with name ${name} already exists`);
    const buildInfo = body.buildInfo as { dockerfileContent?: string; contextHashes?: string[] } | undefined;
    const imageName = typeof body.imageName === "string" ? body.imageName : undefined;
    if (!imageName && !buildInfo?.dockerfileContent)
      throw new ApiError(400, "Either imageName or buildInfo must be provided");
    const id = randomUUID();
    const s = this.add({
      id,
      name,
      image: imageName ?? `${this.o.repo}/snapshot-${id.slice(0, 8)}:latest`,
      imageName,
      buildInfo: buildInfo?.dockerfileContent
        ? { dockerfileContent: buildInfo.dockerfileContent, contextHashes: buildInfo.contextHashes ?? [] }
        : undefined,
      cpu: Number(body.cpu ?? 1),
      memory: Number(body.memory ?? 1),
      disk: Number(body.disk ?? 3),
      entrypoint: Array.isArray(body.entrypoint) ? (body.entrypoint as string[]) : null,
      state: "pending",
    });
    this.background(this.prepare(s));
    return s;
  }

  /** A snapshot of a committed sandbox image, active at once. */
  fromImage(o: { name: string; image: string; sourceSandboxId: string }): Snapshot {
    if (this.find(o.name)) throw new ApiError(409, `Snapshot with name ${o.name} already exists`);
    return this.add({
      id: randomUUID(),
      name: o.name,
      image: o.image,
      state: "active",
      cpu: 1,
      memory: 1,
      disk: 3,
      entrypoint: null,
      sourceSandboxId: o.sourceSandboxId,
    });
  }

  find(idOrName: string): Snapshot | undefined {
    return this.all.get(idOrName) ?? [...this.all.values()].find((s) => s.name === idOrName);
  }

  get(idOrName: string): Snapshot {
    const s = this.find(idOrName);
    if (!s) throw new ApiError(404, `Snapshot ${idOrName} not found`);
    return s;
  }

  /** GET /snapshots: one page (1-based) of PaginatedSnapshots, newest first. */
  list(q: URLSearchParams): object {
    const page = Math.max(1, Number(q.get("page") ?? 1));
    const limit = Math.max(1, Number(q.get("limit") ?? 100));
    const items = [...this.all.values()]
      .filter((s) => !q.get("name") || s.name.includes(q.get("name") ?? ""))
      .filter((s) => !q.get("sourceSandboxId") || s.sourceSandboxId === q.get("sourceSandboxId"))
      .sort((a, b) => b.createdAt.getTime() - a.createdAt.getTime());
    return {
      items: items.slice((page - 1) * limit, page * limit).map((s) => this.dto(s)),
      total: items.length,
      page,
      totalPages: Math.ceil(items.length / limit),
    };
  }

  /** DELETE /snapshots/{id}: the record, and the image when the double made it. */
  async remove(id: string): Promise<void> {
    const s = this.get(id);
    this.all.delete(s.id);
    if (!s.imageName) await this.o.docker.docker.images.remove(s.image);
  }

  /** Waits for the builds under way (close() must not race them). */
  async settle(): Promise<void> {
    await Promise.allSettled([...this.running]);
  }

  background(p: Promise<unknown>): void {
    const tracked = p.catch(() => undefined).finally(() => this.running.delete(tracked));
    this.running.add(tracked);
  }

  dto(s: Snapshot): object {
    return {
      id: s.id,
      organizationId: this.o.organizationId,
      general: false,
      name: s.name,
      imageName: s.imageName ?? s.image,
      state: s.state,
      size: null,
      entrypoint: s.entrypoint,
      cpu: s.cpu,
      gpu: 0,
      mem: s.memory,
      disk: s.disk,
      errorReason: s.errorReason,
      createdAt: s.createdAt.toISOString(),
      updatedAt: s.updatedAt.toISOString(),
      lastUsedAt: null,
      ...(s.buildInfo
        ? {
            buildInfo: {
              ...s.buildInfo,
              createdAt: s.createdAt.toISOString(),
              updatedAt: s.updatedAt.toISOString(),
              snapshotRef: s.image,
            },
          }
        : {}),
      regionIds: [],
      ref: s.image,
      sourceSandboxId: s.sourceSandboxId,
    };
  }

  private add(
    p: Omit<Snapshot, "createdAt" | "updatedAt" | "log" | "errorReason" | "sourceSandboxId"> &
      Partial<Pick<Snapshot, "sourceSandboxId">>,
  ): Snapshot {
    const now = new Date();
    const s: Snapshot = {
      sourceSandboxId: null,
      ...p,
      errorReason: null,
      createdAt: now,
      updatedAt: now,
      log: new BuildLog(),
    };
    if (s.state === "active") s.log.end();
    this.all.set(s.id, s);
    return s;
  }

  private set(s: Snapshot, state: SnapshotState, errorReason: string | null = null): void {
    s.state = state;
    s.errorReason = errorReason;
    s.updatedAt = new Date();
  }

  /** A named image must exist on the engine; a build runs the SDK's Dockerfile. */
  private async prepare(s: Snapshot): Promise<void> {
    try {
      if (!s.buildInfo) {
        if (!(await this.o.docker.docker.images.info(s.image)))
          return this.set(s, "error", `image ${s.image} is not on the local engine (the double never pulls)`);
        return this.set(s, "active");
      }
      this.set(s, "building");
      await buildImage({
        docker: this.o.docker,
        storage: this.o.storage,
        organizationId: this.o.organizationId,
        dockerfile: s.buildInfo.dockerfileContent,
        contextHashes: s.buildInfo.contextHashes,
        tag: s.image,
        labels: { ...this.o.docker.labels, "ai.denv.daytona.snapshot": s.id },
        log: s.log,
      });
      this.set(s, "active");
    } catch (e) {
      s.log.write(String(e instanceof Error ? e.message : e));
      this.set(s, "build_failed", String(e instanceof Error ? e.message : e));
    } finally {
      s.log.end();
    }
  }
}
