import { Readable } from "node:stream";
import { ServerError, Status } from "nice-grpc";
import { packEntries } from "../../../files/tar-pack.js";
import type { DoubleDocker } from "../../testing/double-docker.js";
import { STATUS } from "./modal-messages.js";
import { modalId } from "./modal-sandboxes.js";
import type { Msg } from "./modal-wire.js";

/** An image build the double runs or ran: its end, and its GenericResult once it ended. */
interface Build {
  done: Promise<void>;
  result?: Msg;
}

/** The builder's last lines a failed build reports as its exception. */
const ERROR_LINES = 8;

/**
 * Images of the Modal double, each an id (`im-…`) for a local image: a registry name the double
 * was given (the SDK's `images.fromRegistry(name)` asks ImageGetOrCreate for the one-line
 * Dockerfile `FROM name`, answered at once), an image built from Dockerfile commands, or a
 * sandbox's filesystem snapshot, which the double commits.
 *
 * Builds are what the SDK's `dockerfileCommands(...).build(app)` asks: ImageGetOrCreate with
 * `FROM <name>` (or `FROM base` and the base's image id, for a layer on a built one) and the
 * commands after it, answered with the image id and no result, so the SDK joins the build through
 * ImageJoinStreaming until the result comes. The double runs `docker build` on the local engine
 * with a context holding only that Dockerfile (the SDK sends no context files), its RUN steps on
 * no network unless the server was given `buildNetwork: "default"` (a Dockerfile that installs
 * packages), and never pulls: a FROM or `COPY --from` not on the engine fails the build. As at
 * Modal, the same definition answers the image built before (unless `forceBuild`).
 */
export class ModalImages {
  /** Image id → local image reference. */
  private readonly refs = new Map<string, string>();
  private readonly byName = new Map<string, string>();
  /** A build's definition (base and commands) → its image id. */
  private readonly byDefinition = new Map<string, string>();
  private readonly builds = new Map<string, Build>();
  /** The image ids ImageDelete removed. */
  readonly deleted = new Set<string>();

  constructor(
    private readonly docker: DoubleDocker,
    /** Registry names → images already on the engine (the double never pulls). */
    private readonly allowed: Record<string, string>,
    /** The repository snapshot and built images are tagged in. */
    private readonly repo: string,
    private readonly buildNetwork: "none" | "default",
  ) {}

  async getOrCreate(r: Msg): Promise<Msg> {
    const commands = (r.image?.dockerfileCommands ?? []) as string[];
    const fail = (exception: string) => ({
      imageId: modalId("im"),
      result: { status: STATUS.failure, exception },
    });
    const from = /^FROM (\S+)$/.exec(commands[0] ?? "")?.[1];
    if (!from)
      return fail(`the Modal double builds from a first line FROM <image>: ${JSON.stringify(commands)}`);
    let base: string | undefined;
    if (from === "base") {
      const id = ((r.image?.baseImages ?? []) as Msg[]).find((b) => b.dockerTag === "base")?.imageId;
      base = id ? this.refs.get(id) : undefined;
      if (!base) return fail(`base image ${id ?? "(none given)"} not found`);
    } else {
      base = this.allowed[from];
      if (!base || !(await this.docker.hasImage(base)))
        return fail(`the Modal double has no image ${from} (it never pulls)`);
      if (commands.length === 1) return this.registryImage(from, base);
    }
    for (const m of commands.join("\n").matchAll(/--from=(\S+)/gi)) {
      if (!(await this.docker.hasImage(m[1] ?? "")))
        return fail(`COPY --from=${m[1]}: not on the engine (the Modal double never pulls)`);
    }
    const definition = JSON.stringify([base, commands.slice(1)]);
    const known = this.byDefinition.get(definition);
    if (known && !r.forceBuild) {
      const b = this.builds.get(known);
      if (b?.result?.status !== STATUS.failure)
        return { imageId: known, ...(b?.result ? { result: b.result } : {}) };
    }
    const imageId = modalId("im");
    const dockerfile = [`FROM ${base}`, ...commands.slice(1)].join("\n");
    const build: Build = { done: Promise.resolve() };
    build.done = this.build(imageId, dockerfile).then((result) => {
      build.result = result;
    });
    this.builds.set(imageId, build);
    this.byDefinition.set(definition, imageId);
    return { imageId };
  }

  /** Streams a build's result once it ended, or ends empty after `timeout` seconds (the SDK joins again). */
  async *join(r: Msg, signal: AbortSignal): AsyncGenerator<Msg> {
    const b = this.builds.get(r.imageId);
    if (!b) throw new ServerError(Status.NOT_FOUND, `Image ${r.imageId} not found`);
    if (!b.result) {
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([
        b.done,
        new Promise<void>((res) => {
          timer = setTimeout(res, (r.timeout || 55) * 1000);
          signal.addEventListener("abort", () => res(), { once: true });
        }),
      ]);
      clearTimeout(timer);
    }
    if (b.result) yield { result: b.result, entryId: "1", eof: true };
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

  /**
   * ImageDelete: the image is gone (its id answers NOT_FOUND from then on, a definition that built
   * it builds anew) and its local image removed; a registry name's image (never the double's) stays
   * on the engine. Deleted ids are kept in `deleted`.
   */
  async delete(imageId: string): Promise<void> {
    const ref = this.refs.get(imageId);
    if (!ref) throw new ServerError(Status.NOT_FOUND, `Could not find image with ID ${imageId}`);
    this.refs.delete(imageId);
    this.builds.delete(imageId);
    for (const [k, v] of this.byDefinition) if (v === imageId) this.byDefinition.delete(k);
    for (const [k, v] of this.byName) if (v === imageId) this.byName.delete(k);
    this.deleted.add(imageId);
    // A sandbox still running from it keeps the local image until close() (Modal's own keeps running).
    if (ref.startsWith(`${this.repo}:`)) await this.docker.removeImage(ref).catch(() => undefined);
  }

  /** Waits for every build still running (so that what it makes is there to be removed). */
  async settle(): Promise<void> {
    await Promise.all([...this.builds.values()].map((b) => b.done));
  }

  /** The one-line `FROM name` image: an id for the local image, the same one each time. */
  private registryImage(name: string, local: string): Msg {
    let imageId = this.byName.get(name);
    if (!imageId) {
      imageId = modalId("im");
      this.byName.set(name, imageId);
      this.refs.set(imageId, local);
    }
    return { imageId, result: { status: STATUS.success } };
  }

  /** Runs the build; its GenericResult (failure with the builder's last lines and the engine's words). */
  private async build(imageId: string, dockerfile: string): Promise<Msg> {
    const tag = `${this.repo}:${imageId.slice(3).toLowerCase()}`;
    const lines: string[] = [];
    try {
      const context = await packEntries([{ name: "Dockerfile", content: dockerfile }]);
      await this.docker.docker.images.build(
        Readable.from(context),
        {
          tag,
          dockerfile: "Dockerfile",
          args: {},
          // RUN steps reach nothing unless asked: a test's traffic stays on this machine.
          network: this.buildNetwork,
          labels: { ...this.docker.labels, "ai.denv.modal.image": imageId },
        },
        (line) => lines.push(...line.split("\n").filter((l) => l.trim() !== "")),
      );
      this.refs.set(imageId, tag);
      return { status: STATUS.success };
    } catch (e) {
      const cause = (e instanceof Error ? e.message : String(e)).split("\n")[0] ?? "";
      const exception = [...lines.slice(-ERROR_LINES), cause.replace(/^build \S+ failed: /, "")].join("\n");
      return { status: STATUS.failure, exception };
    }
  }
}
