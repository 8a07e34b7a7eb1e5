import { createHash } from "node:crypto";
import { readdir, readFile, readlink } from "node:fs/promises";
import { join, posix, relative, resolve, sep } from "node:path";
import { DenvError, type ServicePlan, type VerifierPlan } from "@denv/spec";
import type { E2bRecords } from "./e2b-records.js";
import { type E2bConnection, loadE2b, sdkOptions } from "./e2b-sdk.js";
import { shellQuote } from "./sandbox-exec.js";

/** What a template is built from: a service's build or image, caps, and command. */
export type TemplateSource = Pick<
  ServicePlan,
  "name" | "build" | "image" | "resources" | "command" | "healthcheck"
>;

/** The agent service's template: its alias, and whether this deploy built it. */
export interface BuiltTemplate {
  alias: string;
  built: boolean;
  /** The content hash the alias ends with. */
  hash: string;
}

/**
 * The E2B template of a service, built with the SDK's template builder: `fromDockerfile` with the
 * service's build context for `build:`, `fromImage` for `image:`, and the service's cpu and memory
 * caps as the template's. Its alias is `denv-<host>-<project>-<content hash>`: the hash covers
 * the Dockerfile, every file of the context (path, type, mode, content or link target) and the
 * caps and the start command, so that a deploy of the same content reuses the template and any
 * change builds a new one.
 */
export async function buildTemplate(
  conn: E2bConnection,
  input: {
    hostId: string;
    project: string;
    projectDir: string;
    /** The agent service, or the verifier as one (its build or image, and its caps). */
    service: TemplateSource;
    onLog?: (line: string) => void;
  },
): Promise<BuiltTemplate> {
  const { Template } = await loadE2b();
  const svc = input.service;
  const cpuCount = Math.max(1, Math.ceil(svc.resources.cpus));
  // E2B takes memory in MiB, an even number.
  const memoryMB = Math.ceil(svc.resources.memoryBytes / 2 ** 20 / 2) * 2;
  const hash = createHash("sha256");
  hash.update(JSON.stringify({ cpuCount, memoryMB }));
  let template: import("e2b").TemplateBuilder;
  if (svc.build) {
    const root = resolve(input.projectDir);
    const context = resolve(root, svc.build.context);
    if (context !== root && !context.startsWith(root + sep)) {
      throw new DenvError("invalid_compose", `service '${svc.name}': build context is outside the project`);
    }
    const dockerfile = await readFile(join(context, svc.build.dockerfile), "utf8");
    hash.update(`dockerfile\0${dockerfile}\0`);
    await hashTree(hash, context);
    template = Template({ fileContextPath: context }).fromDockerfile(dockerfile);
  } else {
    hash.update(`image\0${svc.image}\0`);
    template = Template().fromImage(svc.image);
  }
  const start = startCommands(svc);
  if (start) {
    hash.update(`start\0${start.startCmd}\0${start.readyCmd}\0`);
  }
  const final = start ? template.setStartCmd(start.startCmd, start.readyCmd) : template;
  const digest = hash.digest("hex").slice(0, 16);
  const alias = `${templatePrefix(input.hostId)}${slug(input.project, 24)}-${digest}`;
  const opts = sdkOptions(conn);
  if (await Template.exists(alias, opts)) return { alias, built: false, hash: digest };
  await Template.build(final, alias, {
    ...opts,
    cpuCount,
    memoryMB,
    ...(input.onLog ? { onBuildLogs: (e: { message: string }) => input.onLog?.(e.message) } : {}),
  });
  return { alias, built: true, hash: digest };
}

/**
 * The service's command as the template's start command, and its healthcheck as the ready command
 * E2B runs until it exits 0 (`true` without one): each a line for a shell, exec form quoted word by
 * word.
 */
export function startCommands(svc: TemplateSource): { startCmd: string; readyCmd: string } | undefined {
  if (svc.command === undefined) return undefined;
  const line = (c: string | readonly string[]) => (typeof c === "string" ? c : c.map(shellQuote).join(" "));
  const [form, ...test] = svc.healthcheck?.test ?? ["NONE"];
  const readyCmd =
    form === "CMD-SHELL" ? (test[0] ?? "true") : form === "CMD" && test.length > 0 ? line(test) : "true";
  return { startCmd: line(svc.command), readyCmd };
}

/**
 * The templates a deploy needs, each recorded (`denvd release` deletes them): the agent service's,
 * and, when the verifier reads only files (`services: false`), the verifier's own, from its image:
 * it gets a sandbox of its own.
 */
export async function buildTemplates(
  conn: E2bConnection,
  records: E2bRecords,
  input: {
    hostId: string;
    project: string;
    projectDir: string;
    service: ServicePlan;
    verifier: VerifierPlan | undefined;
    onLog?: (line: string) => void;
  },
): Promise<{ template: BuiltTemplate; verifierTemplate: string | undefined }> {
  const template = await buildTemplate(conn, input);
  await records.putTemplate(template.alias);
  const v = input.verifier;
  if (v?.services !== false) return { template, verifierTemplate: undefined };
  const verifier = await buildTemplate(conn, {
    ...input,
    service: { name: "verifier", build: v.build, image: v.image, resources: v.resources },
    onLog: (line) => input.onLog?.(`verifier: ${line}`),
  });
  await records.putTemplate(verifier.alias);
  return { template, verifierTemplate: verifier.alias };
}

/** What every alias and snapshot name of this host starts with (gc finds them by it). */
export function templatePrefix(hostId: string): string {
  return `denv-${slug(hostId, 16)}-`;
}

/** Lower-case letters, digits and dashes, at most `max` of them (E2B's alias alphabet). */
export function slug(s: string, max: number): string {
  return (
    s
      .toLowerCase()
      .replace(/[^a-z0-9]+/g, "-")
      .replace(/^-+|-+$/g, "")
      .slice(0, max) || "x"
  );
}

export async function hashTree(hash: ReturnType<typeof createHash>, root: string): Promise<void> {
  const walk = async (dir: string): Promise<void> => {
    const entries = (await readdir(dir, { withFileTypes: true })).sort((a, b) =>
      a.name.localeCompare(b.name),
    );
    for (const e of entries) {
      const abs = join(dir, e.name);
      const rel = relative(root, abs).split(sep).join(posix.sep);
      if (e.isDirectory()) {
        hash.update(`d\0${rel}\0`);
        await walk(abs);
      } else if (e.isSymbolicLink()) hash.update(`l\0${rel}\0${await readlink(abs)}\0`);
      else if (e.isFile()) {
        hash.update(`f\0${rel}\0`);
        hash.update(await readFile(abs));
        hash.update("\0");
      }
    }
  };
  await walk(root);
}
