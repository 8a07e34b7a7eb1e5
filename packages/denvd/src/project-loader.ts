import { existsSync, readFileSync } from "node:fs";
import { basename, join, resolve, sep } from "node:path";
import { DenvError, type Plan, type ProjectKind, validateCompose } from "@denv/spec";
import { HostRefusals } from "@denv/spec/messages";

/** The file names Docker Compose looks for, in its order. */
export const COMPOSE_NAMES = ["compose.yaml", "compose.yml", "docker-compose.yaml", "docker-compose.yml"];

export function findComposeFile(dir: string): string {
  for (const name of COMPOSE_NAMES) {
    if (existsSync(join(dir, name))) return name;
  }
  throw new DenvError(
    "invalid_compose",
    `no compose file in ${dir}: expected one of ${COMPOSE_NAMES.join(", ")}`,
  );
}

/** Reads and validates a project's compose file; refusals become one DenvError listing them all. */
export function loadPlan(
  projectDir: string,
  opts: { composeFile?: string; projectName?: string; env?: Record<string, string | undefined> } = {},
): { plan: Plan; notes: string[] } {
  const root = resolve(projectDir);
  const file = opts.composeFile ?? findComposeFile(root);
  const inside = (rel: string): string | undefined => {
    const abs = resolve(root, rel);
    return abs === root || abs.startsWith(root + sep) ? abs : undefined;
  };
  let text: string;
  try {
    text = readFileSync(join(root, file), "utf8");
  } catch (err) {
    throw new DenvError("invalid_compose", `cannot read ${join(root, file)}: ${(err as Error).message}`);
  }
  const result = validateCompose(text, {
    env: opts.env ?? {},
    projectName: opts.projectName ?? basename(root),
    readFile: (rel) => {
      const abs = inside(rel);
      if (!abs || !existsSync(abs)) return undefined;
      return readFileSync(abs, "utf8");
    },
    exists: (rel) => {
      const abs = inside(rel);
      return abs !== undefined && existsSync(abs);
    },
  });
  if (!result.ok) {
    throw new DenvError(
      "invalid_compose",
      `${file} is refused:\n${result.refusals.map((r) => `  ${r}`).join("\n")}`,
      result.refusals,
    );
  }
  return { plan: result.plan, notes: result.notes };
}

/**
 * The plan a deploy asks for (given, or read from the project folder), refused when the file asks
 * for another kind than the one the project's admin set: the first step of every runtime's deploy.
 */
export function deployPlan(
  project: string,
  projectDir: string,
  req: {
    plan?: Plan | undefined;
    composeFile?: string | undefined;
    env?: Record<string, string | undefined> | undefined;
    kind?: ProjectKind | undefined;
  },
): Plan {
  const plan =
    req.plan ??
    loadPlan(projectDir, { projectName: project, composeFile: req.composeFile, env: req.env }).plan;
  if (req.kind !== undefined && plan.kind !== req.kind) {
    throw new DenvError("forbidden", HostRefusals.kindMismatch(project, req.kind, plan.kind));
  }
  return plan;
}
