import { ServerError, Status } from "nice-grpc";
import type { DoubleDocker } from "../../testing/double-docker.js";
import { STATUS } from "./modal-messages.js";
import { modalId } from "./modal-sandboxes.js";
import type { Msg } from "./modal-wire.js";

/**
 * Images of the Modal double, each an id (`im-…`) for a local image: a registry name the double
 * was given (the SDK's `images.fromRegistry(name)` asks ImageGetOrCreate for the one-line
 * Dockerfile `FROM name`), or a sandbox's filesystem snapshot, which the double commits.
 */
export class ModalImages {
  /** Image id → local image reference. */
  private readonly refs = new Map<string, string>();
  private readonly byName = new Map<string, string>();

  constructor(
    private readonly docker: DoubleDocker,
    /** Registry names → images already on the engine (the double never pulls). */
    private readonly allowed: Record<string, string>,
    /** The repository snapshot images are committed to. */
    private readonly repo: string,
  ) {}

  /**
   * The id of a registry image, built at once (a finished result, so the SDK does not join a
   * build stream); any Dockerfile step beyond `FROM` fails the build, as the double builds nothing.
   */
  async getOrCreate(r: Msg): Promise<Msg> {
    const commands = r.image?.dockerfileCommands as string[] | undefined;
    const from = commands?.length === 1 ? /^FROM (\S+)$/.exec(commands[0] ?? "")?.[1] : undefined;
    const fail = (exception: string) => ({
      imageId: modalId("im"),
      result: { status: STATUS.failure, exception },
    });
    if (!from) return fail(`the Modal double builds no images: ${JSON.stringify(commands)}`);
    const local = this.allowed[from];
    if (!local || !(await this.docker.hasImage(local)))
      return fail(`the Modal double has no image ${from} (it never pulls)`);
    let imageId = this.byName.get(from);
    if (!imageId) {
      imageId = modalId("im");
      this.byName.set(from, imageId);
      this.refs.set(imageId, local);
    }
    return { imageId, result: { status: STATUS.success } };
  }

  /** An image id that exists (ImageFromId). */
  get(imageId: string): string {
    if (!this.refs.has(imageId)) throw new ServerError(Status.NOT_FOUND, `Image ${imageId} not found`);
    return imageId;
  }

  ref(imageId: string): string | undefined {
    return this.refs.get(imageId);
  }

  /** Commits the container's filesystem (paused meanwhile) as a new image. */
  async snapshot(container: string, snapshotId: string): Promise<string> {
    const imageId = modalId("im");
    const tag = imageId.slice(3).toLowerCase();
    await this.docker.commit(container, this.repo, tag, { "ai.denv.modal.snapshot": snapshotId });
    this.refs.set(imageId, `${this.repo}:${tag}`);
    return imageId;
  }
}
