import { createHash } from "node:crypto";
import { readFile } from "node:fs/promises";
import { join, resolve, sep } from "node:path";
import { DenvError, type Plan, type ServicePlan } from "@denv/spec";
import { hashTree, slug, templatePrefix } from "../e2b/build-template.js";
import { verifierSharesImage } from "../e2b/check-plan.js";
import { type PrimeHost, provider } from "./prime-host.js";
import { PrimeImages } from "./prime-images.js";

/**
 * The image a service's sandbox starts from. A `build:` is built by Prime's image API from the
 * service's build context and Dockerfile, named `denv-<host>-<project>` with its content hash as
 * tag (the Dockerfile and every file of the context), so that the same content reuses the built
 * image and any change builds a new one; an `image:` is started as it is (Prime pulls it).
 */
export async function serviceImage(
  host: PrimeHost,
  input: { project: string; projectDir: string; service: Pick<ServicePlan, "name" | "build" | "image"> },
): Promise<{ reference: string; built: boolean }> {
  const svc = input.service;
  if (!svc.build) return { reference: svc.image ?? "", built: false };
  const root = resolve(input.projectDir);
  const context = resolve(root, svc.build.context);
  if (context !== root && !context.startsWith(root + sep)) {
    throw new DenvError("invalid_compose", `service '${svc.name}': build context is outside the project`);
  }
  const hash = createHash("sha256");
  hash.update(`dockerfile\0${svc.build.dockerfile}\0`);
  hash.update(await readFile(join(context, svc.build.dockerfile)));
  await hashTree(hash, context);
  const name = `${templatePrefix(host.hostId)}${slug(input.project, 24)}`;
  const tag = hash.digest("hex").slice(0, 16);
  const images = new PrimeImages(host.api);
  const done = (await provider(() => images.listImages({ search: name }))).find(
    (i) => i.name === name && i.tag === tag && i.status === "COMPLETED" && i.reference,
  );
  if (done?.reference) return { reference: done.reference, built: false };
  const reference = await provider(() =>
    images.buildImage({ name, tag, context, dockerfile: svc.build?.dockerfile ?? "Dockerfile" }),
  );
  return { reference, built: true };
}

/**
 * The images a deploy needs, built in parallel (serviceImage): each service's, by service name,
 * and the verifier's when it is not the agent service's (it then grades in a sandbox of it, on
 * the fork's network).
 */
export async function planImages(
  host: PrimeHost,
  input: { project: string; projectDir: string; plan: Plan },
): Promise<{ digests: Record<string, string>; verifierImage?: string }> {
  const { project, projectDir, plan } = input;
  const v = plan.verifier;
  const agent = plan.services.find((s) => s.name === plan.agent.service);
  const ownVerifier = v !== undefined && agent !== undefined && !verifierSharesImage(v, agent);
  const [verifier, ...images] = await Promise.all([
    ownVerifier
      ? serviceImage(host, {
          project,
          projectDir,
          service: { name: "verifier", image: v.image, ...(v.build ? { build: v.build } : {}) },
        })
      : undefined,
    ...plan.services.map((service) => serviceImage(host, { project, projectDir, service })),
  ]);
  const digests = Object.fromEntries(plan.services.map((s, i) => [s.name, images[i]?.reference ?? ""]));
  return { digests, ...(verifier ? { verifierImage: verifier.reference } : {}) };
}
