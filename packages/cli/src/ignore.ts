import { readFileSync } from "node:fs";
import path from "node:path";
import { DEFAULT_COMPOSE_FILES } from "./compose-files.js";

/**
 * Which files of a project folder `denv deploy` uploads. `.git` and `node_modules` (at any
 * depth) are left out, then the root `.dockerignore` applies with Docker's rules (paths from
 * the root, `*`, `?`, `**`, `!` to re-include, the last matching line wins). `.gitignore` is
 * not read: it often lists files a build or the compose file needs (`.env`, generated code).
 * Whatever compose itself reads at the root (the compose file, `.env`) and what the host's
 * `docker build` reads (Dockerfiles, `.dockerignore` files) always goes, as Docker always
 * sends its Dockerfile and .dockerignore.
 */

interface Rule {
  negate: boolean;
  regex: RegExp;
  /** The pattern's text, to tell whether a re-include may reach below an excluded folder. */
  text: string;
}

const BUILT_IN = ["**/.git", "**/node_modules"];
const ALWAYS = new Set<string>([...DEFAULT_COMPOSE_FILES, ".env"]);

export function uploadFilter(root: string): (rel: string, isDirectory: boolean) => boolean {
  const rules = [...BUILT_IN, ...readDockerignore(root)].flatMap((line) => {
    const rule = toRule(line);
    return rule === undefined ? [] : [rule];
  });
  return (rel, isDirectory) => {
    const base = path.posix.basename(rel);
    if (ALWAYS.has(rel) || base === ".dockerignore" || (!isDirectory && /^Dockerfile/.test(base)))
      return true;
    let excluded = false;
    for (const rule of rules) {
      if (matches(rule.regex, rel)) excluded = !rule.negate;
    }
    // An excluded folder is still entered when a later `!` line may re-include something in it.
    if (excluded && isDirectory) return rules.some((r) => r.negate && r.text.startsWith(`${rel}/`));
    return !excluded;
  };
}

function readDockerignore(root: string): string[] {
  try {
    return readFileSync(path.join(root, ".dockerignore"), "utf8").split(/\r?\n/);
  } catch {
    return [];
  }
}

function toRule(line: string): Rule | undefined {
  let text = line.trim();
  if (text === "" || text.startsWith("#")) return undefined;
  const negate = text.startsWith("!");
  if (negate) text = text.slice(1).trim();
  text = path.posix.normalize(text.replace(/^\/+/, "")).replace(/\/+$/, "");
  if (text === "." || text === "") return undefined;
  return { negate, regex: patternRegex(text), text };
}

/** A pattern matches a path, or one of the folders above it (so a folder takes its contents). */
function matches(regex: RegExp, rel: string): boolean {
  if (regex.test(rel)) return true;
  for (let i = rel.indexOf("/"); i !== -1; i = rel.indexOf("/", i + 1)) {
    if (regex.test(rel.slice(0, i))) return true;
  }
  return false;
}

function patternRegex(pattern: string): RegExp {
  let out = "";
  for (let i = 0; i < pattern.length; i++) {
    const ch = pattern[i] as string;
    if (ch === "*" && pattern[i + 1] === "*") {
      // `**/` is any number of folders (none too); a trailing `**` is anything.
      if (pattern[i + 2] === "/") {
        out += "(?:.*/)?";
        i += 2;
      } else {
        out += ".*";
        i += 1;
      }
    } else if (ch === "*") out += "[^/]*";
    else if (ch === "?") out += "[^/]";
    else if (ch === "[") {
      const end = pattern.indexOf("]", i + 1);
      if (end === -1) out += "\\[";
      else {
        out += `[${pattern
          .slice(i + 1, end)
          .replace(/^!/, "^")
          .replace(/\\/g, "\\\\")}]`;
        i = end;
      }
    } else if (ch === "\\" && i + 1 < pattern.length) {
      out += escapeChar(pattern[++i] as string);
    } else out += escapeChar(ch);
  }
  return new RegExp(`^${out}$`);
}

const escapeChar = (ch: string) => ch.replace(/[.+^${}()|[\]\\/]/g, "\\$&");
