/**
 * A Dockerfile read as steps, for the provider runtimes that build or start an image without
 * Docker (Modal's image API takes its steps; Prime starts a service's ENTRYPOINT and CMD itself).
 */

/** One instruction of a Dockerfile: its keyword (upper case), its arguments, its lines as written. */
export interface Instruction {
  keyword: string;
  args: string;
  raw: string;
}

/** The file's instructions; comments, blank lines and parser directives dropped, continuations joined. */
export function instructions(text: string): Instruction[] {
  const out: Instruction[] = [];
  let raw: string[] = [];
  let joined = "";
  for (const line of text.split(/\r?\n/)) {
    if (/^\s*#/.test(line) || (raw.length === 0 && line.trim() === "")) {
      if (raw.length > 0) raw.push(line);
      continue;
    }
    raw.push(line);
    const cont = /\\\s*$/.test(line);
    joined += `${cont ? line.replace(/\\\s*$/, "") : line} `;
    if (cont) continue;
    const m = /^\s*(\S+)\s*([\s\S]*)$/.exec(joined) ?? [];
    out.push({ keyword: (m[1] ?? "").toUpperCase(), args: (m[2] ?? "").trim(), raw: raw.join("\n") });
    raw = [];
    joined = "";
  }
  if (raw.length > 0) {
    const m = /^\s*(\S+)\s*([\s\S]*)$/.exec(joined) ?? [];
    out.push({ keyword: (m[1] ?? "").toUpperCase(), args: (m[2] ?? "").trim(), raw: raw.join("\n") });
  }
  return out;
}

/** What an image runs and as whom, when compose says nothing: its Dockerfile's last stage's. */
export interface ImageDefaults {
  entrypoint?: string[] | string;
  cmd?: string[] | string;
  user?: string;
  workdir?: string;
}

/**
 * The ENTRYPOINT, CMD, USER and WORKDIR the image of a Dockerfile's last stage has, as Docker
 * would give them: a stage starts from the stage it names (`FROM base AS x` … `FROM x`) or from
 * nothing denv knows (an image's own are not read: its config is not here), an ENTRYPOINT resets
 * a CMD the stage inherited, a relative WORKDIR is joined to the one before. Exec form (a JSON array) is
 * an argv; shell form a line for `/bin/sh -c`.
 */
export function imageDefaults(text: string): ImageDefaults {
  const stages = new Map<string, ImageDefaults>();
  let current: ImageDefaults = {};
  let cmdHere = false;
  for (const { keyword, args } of instructions(text)) {
    if (keyword === "FROM") {
      cmdHere = false;
      const [image = "", as, alias] = args.replace(/^--\S+\s+/g, "").split(/\s+/);
      current = { ...(stages.get(image.toLowerCase()) ?? {}) };
      if (as?.toUpperCase() === "AS" && alias) stages.set(alias.toLowerCase(), current);
    } else if (keyword === "ENTRYPOINT") {
      current.entrypoint = commandForm(args);
      if (!cmdHere) delete current.cmd;
    } else if (keyword === "CMD") {
      current.cmd = commandForm(args);
      cmdHere = true;
    } else if (keyword === "USER") current.user = args.trim();
    else if (keyword === "WORKDIR") {
      const dir = args.trim();
      current.workdir = dir.startsWith("/") ? dir : `${(current.workdir ?? "/").replace(/\/$/, "")}/${dir}`;
    }
  }
  return current;
}

/** An ENTRYPOINT's or CMD's arguments: an argv (exec form), else a shell line. */
function commandForm(args: string): string[] | string {
  const text = args.trim();
  if (text.startsWith("[")) {
    try {
      const argv = JSON.parse(text) as unknown;
      if (Array.isArray(argv) && argv.every((a) => typeof a === "string")) return argv;
    } catch {
      // Not JSON: Docker runs it as a shell line too.
    }
  }
  return text;
}
