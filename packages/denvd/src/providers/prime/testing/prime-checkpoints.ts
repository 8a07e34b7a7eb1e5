import { randomBytes } from "node:crypto";
import type { DoubleDocker } from "../../testing/double-docker.js";
import { ApiError } from "./prime-api-error.js";
import type { Sandboxes } from "./prime-sandboxes.js";

export type CheckpointState = "PENDING" | "DURABLE" | "FAILED";

export interface Checkpoint {
  id: string;
  sandboxId: string;
  parentId: string | null;
  teamId: string | null;
  state: CheckpointState;
  depth: number;
  /** The image the checkpointed sandbox was created from (what a restore reports). */
  dockerImage: string;
  /** The committed image, `denv-prime-<server>:<id>`. */
  image: string;
  sizeBytes: number | null;
  error: string | null;
  createdAt: string;
  updatedAt: string;
}

/**
 * Filesystem checkpoints: POST /sandbox/{id}/checkpoints answers PENDING at once and commits the
 * container (frozen meanwhile) to an image in the background, then DURABLE. Like Prime's they
 * chain: a sandbox's next checkpoint has its previous one (or the one it was restored from) as
 * parent, and that newest one, the sandbox's tip, cannot be deleted while the sandbox runs.
 */
export class Checkpoints {
  readonly all = new Map<string, Checkpoint>();
  private readonly committing = new Set<Promise<void>>();

  constructor(
    private readonly docker: DoubleDocker,
    private readonly sandboxes: Sandboxes,
    private readonly repo: string,
  ) {}

  get(id: string): Checkpoint {
    const c = this.all.get(id);
    if (!c) throw new ApiError(404, `Checkpoint ${id} not found`);
    return c;
  }

  /** A durable checkpoint's image and the image its sandbox came from, for a restore. */
  restorable(id: string): { image: string; dockerImage: string } | undefined {
    const c = this.all.get(id);
    return c?.state === "DURABLE" ? { image: c.image, dockerImage: c.dockerImage } : undefined;
  }

  create(sandboxId: string): Checkpoint {
    const sb = this.sandboxes.get(sandboxId);
    if (sb.status !== "RUNNING" || !sb.container)
      throw new ApiError(409, `Sandbox ${sandboxId} is not running`);
    const parent = sb.tip ? this.all.get(sb.tip) : undefined;
    const id = randomBytes(12).toString("hex");
    const t = new Date().toISOString();
    const c: Checkpoint = {
      id,
      sandboxId,
      parentId: parent?.id ?? null,
      teamId: sb.teamId,
      state: "PENDING",
      depth: parent ? parent.depth + 1 : 0,
      dockerImage: sb.dockerImage,
      image: `${this.repo}:${id}`,
      sizeBytes: null,
      error: null,
      createdAt: t,
      updatedAt: t,
    };
    this.all.set(id, c);
    sb.tip = id;
    const container = sb.container;
    const committing = this.docker
      .commit(container, this.repo, id, { "ai.denv.prime.checkpoint": id })
      .then(async () => {
        c.state = "DURABLE";
        c.sizeBytes = (await this.docker.docker.images.info(c.image))?.size ?? null;
      })
      .catch((e: unknown) => {
        c.state = "FAILED";
        c.error = String(e);
      })
      .finally(() => {
        c.updatedAt = new Date().toISOString();
        this.committing.delete(committing);
      });
    this.committing.add(committing);
    return c;
  }

  /** GET /sandbox/{id}/checkpoints: oldest first, or only `only`. */
  list(sandboxId: string, only: string | null): object {
    this.sandboxes.get(sandboxId);
    const checkpoints = [...this.all.values()]
      .filter((c) => c.sandboxId === sandboxId && (!only || c.id === only))
      .map((c) => this.json(c));
    return { checkpoints };
  }

  /** POST /sandbox/checkpoints:batchGet. */
  batch(ids: unknown): object {
    if (!Array.isArray(ids)) throw new ApiError(422, "checkpoint_ids must be a list");
    const checkpoints: object[] = [];
    const errors: object[] = [];
    for (const id of ids as string[]) {
      const c = this.all.get(id);
      if (c) checkpoints.push(this.json(c));
      else errors.push({ checkpoint_id: id, code: "NOT_FOUND", message: `Checkpoint ${id} not found` });
    }
    return { checkpoints, errors };
  }

  async delete(id: string): Promise<void> {
    const c = this.get(id);
    if (c.state === "PENDING") throw new ApiError(409, `Checkpoint ${id} is still pending`);
    const tipOf = [...this.sandboxes.all.values()].find((sb) => sb.tip === id && sb.status === "RUNNING");
    if (tipOf) throw new ApiError(409, `Checkpoint ${id} is the active tip of running sandbox ${tipOf.id}`);
    this.all.delete(id);
    // The engine keeps the image while a container still runs from it (as Prime keeps a
    // checkpoint's data while descendants need it); close() sweeps it then.
    await this.docker.removeImage(c.image);
  }

  /** DELETE /sandbox/{id}/checkpoints: each one as delete() would, refusals listed. */
  async deleteOfSandbox(sandboxId: string): Promise<object> {
    this.sandboxes.get(sandboxId);
    const deleted: string[] = [];
    const errors: object[] = [];
    for (const c of [...this.all.values()].filter((x) => x.sandboxId === sandboxId)) {
      try {
        await this.delete(c.id);
        deleted.push(c.id);
      } catch (e) {
        if (!(e instanceof ApiError)) throw e;
        errors.push({ checkpoint_id: c.id, code: "CONFLICT", message: e.message });
      }
    }
    return { deleted, errors };
  }

  async settle(): Promise<void> {
    await Promise.allSettled([...this.committing]);
  }

  json(c: Checkpoint): object {
    return {
      id: c.id,
      sandbox_id: c.sandboxId,
      parent_id: c.parentId,
      team_id: c.teamId,
      state: c.state,
      depth: c.depth,
      docker_image: c.dockerImage,
      disk_size_bytes: c.sizeBytes,
      stored_bytes: c.sizeBytes,
      occupied_bytes: c.sizeBytes ?? 0,
      error: c.error,
      created_at: c.createdAt,
      updated_at: c.updatedAt,
    };
  }
}
