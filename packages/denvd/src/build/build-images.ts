import type { Plan } from "@denv/spec";
import type { ImageRecord } from "../records.js";
import { type BuildPlace, type BuiltImages, ensureImage } from "../runtime/ensure-image.js";
import type { HostContext } from "../runtime/host-context.js";
import { type BuildNetwork, openBuildNetwork } from "./build-network.js";

export interface ProjectImages {
  images: Record<string, ImageRecord>;
  verifierImage: ImageRecord | undefined;
  /** Where the builds ran and what they fetched (rl-environments); undefined when nothing was built. */
  evidence: ReturnType<BuildNetwork["evidence"]> | { network: "bridge" } | undefined;
}

/**
 * The images of every service and of the verifier. Builds of an rl-environment run on a build
 * network whose only way out is the mirror proxy; a `service` project builds on the engine's
 * bridge, as `docker compose build` would.
 */
export async function buildImages(
  ctx: HostContext,
  project: string,
  plan: Plan,
  projectDir: string,
  command: string,
): Promise<ProjectImages> {
  const builds = [...plan.services.map((s) => s.build), plan.verifier?.build].filter(Boolean);
  const confined = plan.kind === "rl-environment" && builds.length > 0;
  const network = confined
    ? await openBuildNetwork(ctx, project, command, ctx.settings.buildMirrors)
    : undefined;
  const place: BuildPlace | undefined = network
    ? { network: network.name, buildArgs: network.buildArgs }
    : undefined;
  try {
    const built: BuiltImages = new Map();
    const images: Record<string, ImageRecord> = {};
    for (const svc of plan.services) {
      images[svc.name] = await ensureImage(ctx, project, svc.image, svc.build, projectDir, built, place);
    }
    const verifierImage = plan.verifier
      ? await ensureImage(ctx, project, plan.verifier.image, plan.verifier.build, projectDir, built, place)
      : undefined;
    const evidence = network
      ? network.evidence()
      : builds.length > 0
        ? { network: "bridge" as const }
        : undefined;
    return { images, verifierImage, evidence };
  } finally {
    await network?.close();
  }
}
