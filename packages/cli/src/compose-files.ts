import { existsSync, readFileSync, realpathSync } from "node:fs";
import path from "node:path";
import { type ComposeContext, parseEnvFile } from "@denv/spec";

/** The names Docker Compose looks for, in its order. */
export const DEFAULT_COMPOSE_FILES = [
  "compose.yaml",
  "compose.yml",
  "docker-compose.yaml",
  "docker-compose.yml",
] as const;

/** The first default compose file in `dir`, or undefined. */
export function findComposeFile(dir: string): string | undefined {
  return DEFAULT_COMPOSE_FILES.find((name) => existsSync(path.join(dir, name)));
}

export type ContextResult = { ok: true; ctx: ComposeContext } | { ok: false; message: string };

/**
 * The file-system side of compose validation: files are read relative to the compose file's
 * folder (the project), never outside it, and variables come from `env` over the project's
 * `.env` file, as in Docker Compose.
 */
export function composeContextFor(file: string, source: string, env: NodeJS.ProcessEnv): ContextResult {
  const dir = path.dirname(path.resolve(file));
  const root = realpathSync(dir);

  /** The real path of a project-relative path, when it exists and stays inside the project (symlinks too). */
  const inside = (rel: string): string | undefined => {
    const abs = path.resolve(dir, rel);
    if (!existsSync(abs)) return undefined;
    const real = realpathSync(abs);
    return real === root || real.startsWith(root + path.sep) ? real : undefined;
  };

  let fromDotenv: Record<string, string> = {};
  const dotenv = inside(".env");
  if (dotenv !== undefined) {
    const parsed = parseEnvFile(
      readFileSync(dotenv, "utf8"),
      (name) => env[name],
      () => {},
    );
    if (!parsed.ok)
      return {
        ok: false,
        message: `${path.join(path.dirname(source), ".env")} line ${parsed.line}: ${parsed.problem}`,
      };
    fromDotenv = parsed.values;
  }
  // fromEntries defines keys (a variable named __proto__ stays a variable); the shell wins over .env.
  const variables = Object.fromEntries([...Object.entries(fromDotenv), ...Object.entries(env)]);

  return {
    ok: true,
    ctx: {
      env: variables,
      readFile: (rel) => {
        const real = inside(rel);
        if (real === undefined) return undefined;
        try {
          return readFileSync(real, "utf8");
        } catch {
          return undefined;
        }
      },
      exists: (rel) => inside(rel) !== undefined,
      projectName: path.basename(dir),
      source,
    },
  };
}
