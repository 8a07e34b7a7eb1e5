import { spawn } from "node:child_process";
import { resolve } from "node:path";
import { DenvError, Labels, type ServicePlan } from "@denv/spec";
import type { ImageInfo } from "../docker/docker-client.js";
import type { ImageRecord } from "../records.js";
import type { HostContext } from "./host-context.js";

/** The image of a service or a verifier: built from its context, or one already on this host. */
export async function ensureImage(
  ctx: HostContext,
  image: string,
  build: ServicePlan["build"],
  projectDir: string,
): Promise<ImageRecord> {
  if (build) {
    const context = resolve(projectDir, build.context);
    ctx.log(`build ${image} from ${build.context}`);
    const tar = spawn("tar", ["-C", context, "-cf", "-", "."], { stdio: ["ignore", "pipe", "inherit"] });
    const imageId = await ctx.docker.images.build(
      tar.stdout,
      {
        tag: image,
        dockerfile: build.dockerfile,
        args: build.args,
        target: build.target,
        // No project label: projects deploying the same compose file share the tag, and an
        // identical build must give an identical image instead of leaving the old one dangling.
        labels: { [Labels.managed]: "true" },
      },
      (line) => ctx.log(line.trimEnd()),
    );
    const info = (await ctx.docker.images.info(imageId)) as ImageInfo;
    return { image, imageId, repoDigests: info.repoDigests, layers: info.layers };
  }
  const info = await ctx.docker.images.info(image);
  if (!info) {
    throw new DenvError(
      "not_found",
      `image '${image}' is not on this host: build it here, or give the service a build: section`,
    );
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
