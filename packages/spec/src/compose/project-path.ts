import { ComposeReasons } from "../messages.js";

export type ProjectPath = { ok: true; path: string } | { ok: false; reason: string };

/**
 * Normalizes a path given in the compose file to a project-relative POSIX path ("." for the
 * project folder). Absolute paths and paths that climb out are refused: denv reads nothing
 * outside the project. `base` is a project-relative folder the path is relative to.
 */
export function projectPath(raw: string, base = "."): ProjectPath {
  if (/^(\/|~|\\|[A-Za-z]:[\\/])/.test(raw)) return { ok: false, reason: ComposeReasons.absolutePath(raw) };
  const parts: string[] = [];
  // Backslashes count as separators too, so `..\\..` cannot slip through.
  for (const segment of `${base}/${raw}`.split(/[\\/]+/)) {
    if (segment === "" || segment === ".") continue;
    if (segment === "..") {
      if (parts.length === 0) return { ok: false, reason: ComposeReasons.climbsOut(raw) };
      parts.pop();
    } else {
      parts.push(segment);
    }
  }
  return { ok: true, path: parts.length === 0 ? "." : parts.join("/") };
}

/** Joins project-relative paths for display and for ComposeContext lookups. */
export function joinProjectPath(base: string, rel: string): string {
  if (base === ".") return rel;
  if (rel === ".") return base;
  return `${base}/${rel}`;
}
