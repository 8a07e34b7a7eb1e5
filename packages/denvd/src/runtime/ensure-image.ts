import { spawn } from "node:child_process";
import { resolve } from "node:path";
import { DenvError, HostRefusals, Labels, type ServicePlan } from "@denv/spec";
import type { ImageInfo } from "../docker/docker-client.js";
import type { ImageRecord } from "../records.js";
import type { HostContext } from "./host-context.js";

/**
 * The tag denvd builds a project's image under: a namespace of the project's own, never the name
 * the compose file chose (a file could name another project's image, or `debian:bookworm-slim`,
 * and replace it engine-wide). Identical builds of one project share the tag and the image.
 */
export function buildTag(project: string, image: string): string {
  const component = image
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, "-")
    .replace(/^-+|-+$/g, "");
  return `denv-build/${project}/${component || "image"}:latest`;
}

/** Images of one deploy, by the name the compose file gives them (a verifier may name a service's). */
export type BuiltImages = Map<string, ImageRecord>;

/** Where a build's RUN steps run: a network and the build arguments that go with it. */
export interface BuildPlace {
  network: string;
  buildArgs: Record<string, string>;
}

/**
 * The image of a service or a verifier: built from its context under the project's own tag, or
 * one already on this host that no other project's build made.
 */
export async function ensureImage(
  ctx: HostContext,
  project: string,
  image: string,
  build: ServicePlan["build"],
  projectDir: string,
  built: BuiltImages,
  place?: BuildPlace,
): Promise<ImageRecord> {
  if (build) {
    const tag = buildTag(project, image);
    const context = resolve(projectDir, build.context);
    ctx.log(`build ${image} from ${build.context} as ${tag}`);
    const tar = spawn("tar", ["-C", context, "-cf", "-", "."], { stdio: ["ignore", "pipe", "inherit"] });
    const imageId = await ctx.docker.images.build(
      tar.stdout,
      {
        tag,
        dockerfile: build.dockerfile,
        // The place's arguments last: a file cannot point the proxy elsewhere.
        args: { ...build.args, ...place?.buildArgs },
        target: build.target,
        network: place?.network,
        // The host's id: its gc removes the builds that lost their tag to a newer one (collect-garbage.ts).
        labels: {
          [Labels.managed]: "true",
          [Labels.host]: ctx.hostId,
          [Labels.project]: project,
          [Labels.role]: "build",
        },
      },
      (line) => ctx.log(line.trimEnd()),
    );
    const info = (await ctx.docker.images.info(imageId)) as ImageInfo;
    const rec = { image, imageId, repoDigests: info.repoDigests, layers: info.layers };
    built.set(image, rec);
    return rec;
  }
  const same = built.get(image);
  if (same) return same;
  const info = await ctx.docker.images.info(image);
  if (!info) {
    throw new DenvError(
      "not_found",
      `image '${image}' is not on this host: build it here, or give the service a build: section`,
    );
  }
  const owner = info.labels[Labels.project];
  if (info.labels[Labels.managed] === "true" && owner !== undefined && owner !== project) {
    throw new DenvError("forbidden", HostRefusals.foreignImage(image, owner));
  }
  return { image, imageId: info.id, repoDigests: info.repoDigests, layers: info.layers };
}

/** Packs a host directory into a tar file (kept on the host only: the verifier's tests). */
export async function tarDirectory(dir: string, out: string): Promise<void> {
  const code = await new Promise<number>((resolveCode, reject) => {
    const child = spawn("tar", ["-C", dir, "--owner=0", "--group=0", "-cf", out, "."], { stdio: "ignore" });
    child.on("error", reject);
    child.on("close", (c) => resolveCode(c ?? 1));
  });
  if (code !== 0) throw new DenvError("invalid_compose", `cannot read the verifier's tests folder ${dir}`);
}
