import { readFile } from "node:fs/promises";
import { join, resolve, sep } from "node:path";
import { DenvError, type ServicePlan } from "@denv/spec";
import type { App, Image, ModalClient } from "modal";
import { modalDockerfile } from "./modal-dockerfile.js";

/** What a service's image is built from: its name (for what denv says) and its build or image. */
export interface ImageSource {
  name: string;
  build?: Pick<NonNullable<ServicePlan["build"]>, "context" | "dockerfile"> | undefined;
  image?: string | undefined;
}

/** A built image: its id, and the user the Dockerfile's service runs as (its last USER) if it named one. */
export interface ModalImage {
  imageId: string;
  user?: string;
}

export interface BuildWait {
  /**
   * Aborting stops the waiting only (rejecting with the signal's reason): the SDK's `build` takes
   * no signal and Modal's API has no call that cancels a build.
   */
  signal?: AbortSignal;
}

/**
 * The image a service's sandbox starts from, built by Modal's image API as the `modal` SDK
 * (0.11.1) drives it: `images.fromRegistry(base)` and `dockerfileCommands(commands)` from the
 * service's Dockerfile (modal-dockerfile.ts carries its COPY files), then `build(app)`, which asks
 * ImageGetOrCreate and joins the build's stream until Modal reports its end. An `image:` is
 * `fromRegistry(image)` built the same way (Modal pulls it). Modal keys its images by their
 * definition, so the same Dockerfile and files answer the image built before, without a tag of
 * denv's. Resolves with the image id (`im-…`) sandboxes start from.
 *
 * Modal runs every command of a sandbox as the image's user and its exec takes no other
 * (modal-exec.ts), so a Dockerfile that switches USER ends with `USER 0`: denv's root in the
 * sandbox becomes the agent or the service's user for each command through setpriv. The user the
 * file named last is returned instead, for the service's command (as the engine would run it).
 *
 * A failed build rejects in one line naming the service, the build and Modal's words (the last
 * line of the builder's exception: a Dockerfile's error comes after its log).
 */
export async function buildModalImage(
  client: ModalClient,
  app: App,
  input: { projectDir: string; service: ImageSource },
  o: BuildWait = {},
): Promise<ModalImage> {
  const svc = input.service;
  let image: Image;
  let user: string | undefined;
  if (svc.build) {
    const root = resolve(input.projectDir);
    const context = resolve(root, svc.build.context);
    if (context !== root && !context.startsWith(root + sep))
      throw new DenvError("invalid_compose", `service '${svc.name}': build context is outside the project`);
    const text = await readFile(join(context, svc.build.dockerfile), "utf8");
    const d = await modalDockerfile(svc.name, context, text);
    user = d.user;
    image = client.images
      .fromRegistry(d.base)
      .dockerfileCommands(d.user === undefined ? d.commands : [...d.commands, "USER 0"]);
  } else if (svc.image) image = client.images.fromRegistry(svc.image);
  else throw new DenvError("invalid_compose", `service '${svc.name}' has neither build nor image`);

  o.signal?.throwIfAborted();
  const built = image.build(app);
  let onAbort: (() => void) | undefined;
  const aborted = new Promise<never>((_, reject) => {
    onAbort = () => reject(o.signal?.reason);
    o.signal?.addEventListener("abort", onAbort, { once: true });
  });
  try {
    const imageId = (await Promise.race([built, aborted])).imageId;
    return { imageId, ...(user !== undefined ? { user } : {}) };
  } catch (e) {
    if (o.signal?.aborted) {
      built.catch(() => undefined);
      throw o.signal.reason;
    }
    throw buildError(svc.name, e);
  } finally {
    if (onAbort) o.signal?.removeEventListener("abort", onAbort);
  }
}

/**
 * The SDK's build error in one line: `Image build for im-… failed with the exception:\n<Modal's
 * words>` (or terminated, timed out), or a gRPC error of the call itself.
 */
function buildError(service: string, e: unknown): DenvError {
  const text = e instanceof Error ? e.message : String(e);
  const [head = "", ...rest] = text.split("\n");
  const build = /Image build for (\S+)/.exec(head)?.[1];
  const words = rest
    .filter((l) => l.trim() !== "")
    .at(-1)
    ?.trim();
  const what = `Modal's image build${build ? ` ${build}` : ""} of service '${service}'`;
  if (build && words) return new DenvError("docker", `${what} failed: ${words}`);
  return new DenvError("docker", `${what} failed: ${head.replace(/^Image build for \S+ /, "").trim()}`);
}
