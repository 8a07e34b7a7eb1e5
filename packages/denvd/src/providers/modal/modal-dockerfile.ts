import { lstat, readdir, readFile, readlink, stat } from "node:fs/promises";
import { posix, relative, resolve, sep } from "node:path";
import { gzipSync } from "node:zlib";
import { DenvError, ProviderMessages } from "@denv/spec";
import { type PackEntry, packEntries } from "../../files/tar-pack.js";
import { instructions } from "../dockerfile-steps.js";

/** How denv names Modal in what it says (ProviderMessages). */
export const PROVIDER = "Modal";

/** A Dockerfile as the `modal` SDK (0.11.1) builds one: a registry base and the steps after FROM. */
export interface ModalDockerfile {
  /** The FROM image: `client.images.fromRegistry(base)`. */
  base: string;
  /** Every step after FROM, for `image.dockerfileCommands(commands)`. */
  commands: string[];
  /** The file's last USER (the user its service runs as when compose names none), if any. */
  user?: string;
}

/** Base64 characters one RUN carries: under Linux's 128 KiB limit on one argument of an exec. */
const CHUNK = 96 * 1024;
/**
 * Bytes the COPY sources may pack to (tar.gz): each CHUNK is a RUN, so a layer of the image, and
 * an image holds at most 127 layers; 3 MiB is 43 of them.
 */
export const MAX_PACKED_CONTEXT = 3 * 1024 ** 2;
/** Where the image's build keeps the carried files until the last COPY took its own. */
const STAGE = "/.denv-context";

/**
 * Translates a service's Dockerfile into what Modal's image API takes through the SDK: a base
 * (`images.fromRegistry`) and Dockerfile commands (`dockerfileCommands`). The SDK sends no build
 * context (it refuses a `COPY` from one: "COPY commands that copy from local context are not yet
 * supported"), so denv carries the files a COPY names inside the commands: packed (tar.gz, owner
 * 0, fixed times, so the same files make the same commands and Modal's cache answers the same
 * image), base64 in RUN steps of at most CHUNK characters appended to a file under STAGE, unpacked
 * once, and each COPY becomes a RUN (exec form: SHELL cannot change it) that copies its sources
 * to its destination with COPY's rules (a directory's contents, a file into a directory given
 * with a trailing `/` or existing, `--chown` with the user's uid as group when none is given,
 * `--chmod`; the destination relative to WORKDIR and `$VAR`s expanded by the shell from ENV and
 * ARG), as root (`USER 0` around it when the file switched user before). The last COPY removes
 * STAGE. The base image needs `sh`, `base64`, `tar`, `gzip` and `cp` (Debian's and Alpine's have
 * them), and its default user must be root until the file's first USER.
 *
 * Refused in one line (ProviderMessages.unbuildableStep): a second FROM (one stage: the SDK builds
 * `FROM <tag>` and commands), steps before FROM, FROM with flags or variables, ADD, COPY flags
 * but --chown/--chmod/--from, wildcards, a source outside the context or missing, and sources
 * packing to more than MAX_PACKED_CONTEXT bytes. `.dockerignore` is not read: a COPY carries what
 * it names.
 */
export async function modalDockerfile(
  service: string,
  context: string,
  text: string,
): Promise<ModalDockerfile> {
  const refuse = (step: string, why: string) =>
    new DenvError("invalid_compose", ProviderMessages.unbuildableStep(PROVIDER, service, step, why));
  const steps = instructions(text);
  const [first, ...rest] = steps;
  if (first?.keyword !== "FROM") throw refuse(first?.keyword ?? "no FROM", "it must begin with FROM");
  const from = first.args.trim().split(/\s+/);
  if (from[0]?.startsWith("--") || (from.length !== 1 && !(from.length === 3 && /^as$/i.test(from[1] ?? ""))))
    throw refuse(`FROM ${first.args.trim()}`, "Modal builds from one image name, without flags");
  const base = from[0] ?? "";
  if (base.includes("$")) throw refuse(`FROM ${base}`, "the base is named before any ARG is set");

  const copies: Copy[] = [];
  const entries: PackEntry[] = [];
  for (const s of rest) {
    if (s.keyword === "FROM") throw refuse("a second FROM", "Modal builds one stage: FROM and its commands");
    if (s.keyword === "ADD") throw refuse("ADD", "denv carries COPY's files into Modal's build, not ADD's");
    if (s.keyword !== "COPY") continue;
    const c = parseCopy(s.args, refuse);
    if (c.from) continue;
    const index = copies.length;
    for (const [k, src] of c.sources.entries()) {
      if (/[*?[]/.test(src)) throw refuse(`COPY ${src}`, "wildcards are not expanded");
      const abs = resolve(context, src);
      if (abs !== resolve(context) && !abs.startsWith(resolve(context) + sep))
        throw refuse(`COPY ${src}`, "the source is outside the build context");
      const info = await stat(abs).catch(() => undefined);
      if (!info) throw refuse(`COPY ${src}`, "the source is not in the build context");
      c.dirs.push(info.isDirectory());
      await packTree(entries, abs, `${index}/${k}`, info.isDirectory(), (p) => refuse(`COPY ${src}`, p));
    }
    copies.push(c);
  }
  const chunks = copies.length === 0 ? [] : chunked(await packEntries(entries), refuse);

  const commands: string[] = [];
  let user: string | undefined;
  let copied = 0;
  for (const s of rest) {
    if (s.keyword === "USER") user = s.args.trim();
    if (s.keyword !== "COPY" || parseCopy(s.args, refuse).from) {
      commands.push(s.raw);
      continue;
    }
    const c = copies[copied] as Copy;
    if (user !== undefined) commands.push("USER 0");
    if (copied === 0) commands.push(...chunks);
    const last = ++copied === copies.length;
    commands.push(run(`set -e\n${copyScript(copied - 1, c)}${last ? `\nrm -rf ${STAGE}` : ""}`));
    if (user !== undefined) commands.push(`USER ${user}`);
  }
  return { base, commands, ...(user !== undefined ? { user } : {}) };
}

/** One instruction: its keyword, its arguments with continuations joined, its text as written. */
interface Copy {
  sources: string[];
  dest: string;
  chown?: string;
  chmod?: string;
  /** COPY --from=<image>: passed to Modal as written (the SDK allows it). */
  from?: string;
  /** Whether each source is a directory (its contents are copied). */
  dirs: boolean[];
}

function parseCopy(args: string, refuse: (step: string, why: string) => DenvError): Copy {
  const words = args.trim().split(/\s+/);
  const flags: Record<string, string> = {};
  while (words[0]?.startsWith("--")) {
    const [name = "", value = ""] = (words.shift() as string).slice(2).split(/=(.*)/s);
    if (!["chown", "chmod", "from"].includes(name))
      throw refuse(`COPY --${name}`, "denv carries --chown, --chmod and --from only");
    flags[name] = value;
  }
  const rest = words.join(" ");
  let paths: string[];
  if (rest.startsWith("[")) {
    try {
      paths = (JSON.parse(rest) as unknown[]).map(String);
    } catch {
      throw refuse(`COPY ${rest}`, "its JSON form does not parse");
    }
  } else paths = words;
  if (paths.length < 2) throw refuse(`COPY ${rest}`, "it needs a source and a destination");
  return {
    sources: paths.slice(0, -1),
    dest: paths.at(-1) as string,
    ...(flags.chown ? { chown: flags.chown } : {}),
    ...(flags.chmod ? { chmod: flags.chmod } : {}),
    ...(flags.from ? { from: flags.from } : {}),
    dirs: [],
  };
}

/** Adds `abs` under `prefix` (a directory's contents, or the file itself), owner 0, its modes kept. */
async function packTree(
  entries: PackEntry[],
  abs: string,
  prefix: string,
  isDir: boolean,
  refuse: (why: string) => DenvError,
): Promise<void> {
  if (!isDir) {
    const mode = (await stat(abs)).mode & 0o7777;
    entries.push({ name: prefix, content: await readFile(abs), mode });
    return;
  }
  entries.push({ name: `${prefix}/`, type: "directory", mode: (await stat(abs)).mode & 0o7777 });
  const walk = async (dir: string): Promise<void> => {
    for (const name of (await readdir(dir)).sort()) {
      const p = `${dir}/${name}`;
      const rel = relative(abs, p).split(sep).join(posix.sep);
      const info = await lstat(p);
      const mode = info.mode & 0o7777;
      if (info.isDirectory()) {
        entries.push({ name: `${prefix}/${rel}/`, type: "directory", mode });
        await walk(p);
      } else if (info.isSymbolicLink())
        entries.push({ name: `${prefix}/${rel}`, type: "symlink", linkname: await readlink(p) });
      else if (info.isFile()) entries.push({ name: `${prefix}/${rel}`, content: await readFile(p), mode });
      else throw refuse(`${rel} is neither a file, a directory nor a symlink`);
    }
  };
  await walk(abs);
}

/** The packed files as RUN steps appending base64 to STAGE, and the one that unpacks them there. */
function chunked(tar: Buffer, refuse: (step: string, why: string) => DenvError): string[] {
  const packed = gzipSync(tar, { level: 9 });
  if (packed.length > MAX_PACKED_CONTEXT)
    throw refuse(
      `COPY sources packing to ${packed.length} bytes`,
      `the SDK sends no build context, and Dockerfile commands carry at most ${MAX_PACKED_CONTEXT} bytes of files`,
    );
  const b64 = packed.toString("base64");
  const steps = [run(`mkdir -p ${STAGE} && : > ${STAGE}/files.b64`)];
  for (let i = 0; i < b64.length; i += CHUNK)
    steps.push(run(`printf %s '${b64.slice(i, i + CHUNK)}' >> ${STAGE}/files.b64`));
  steps.push(run(`base64 -d ${STAGE}/files.b64 | tar -xzf - -C ${STAGE} && rm ${STAGE}/files.b64`));
  return steps;
}

/** A RUN in exec form: /bin/sh whatever SHELL the file set, and no substitution of Docker's. */
function run(script: string): string {
  return `RUN ${JSON.stringify(["/bin/sh", "-c", script])}`;
}

/** `"…"` for sh, leaving `$VAR` to expand as COPY's destination does. */
function dq(s: string): string {
  return `"${s.replace(/["\\`]/g, "\\$&")}"`;
}

function sq(s: string): string {
  return `'${s.replace(/'/g, "'\\''")}'`;
}

/** The shell that carries out COPY number `n` from STAGE/n. */
function copyScript(n: number, c: Copy): string {
  const lines = [`d=${dq(c.dest)}`, 'case "$d" in /*) ;; *) d="$PWD/$d" ;; esac'];
  const intoDir = c.dest.endsWith("/") || c.sources.length > 1;
  const own: string[] = [];
  if (c.chown) {
    const [u = "", g] = c.chown.split(":");
    lines.push(
      `u=${dq(u)}`,
      g ? `g=${dq(g)}` : 'case "$u" in *[!0-9]*) g=$(id -u "$u") ;; *) g="$u" ;; esac',
    );
    own.push('chown -Rh "$u:$g"');
  }
  if (c.chmod) own.push(`chmod -R ${dq(c.chmod)}`);
  const fix = (path: string) => own.map((cmd) => `${cmd} ${path}`);
  for (const [k, isDir] of c.dirs.entries()) {
    const src = `${STAGE}/${n}/${k}`;
    if (isDir) {
      lines.push(
        'new=; [ -d "$d" ] || new=1; mkdir -p "$d"',
        `for f in ${src}/* ${src}/.[!.]* ${src}/..?*; do [ -e "$f" ] || [ -L "$f" ] || continue`,
        `  t="$d/$(basename "$f")"; cp -a "$f" "$d/"; ${[...fix('"$t"'), ":"].join("; ")}`,
        "done",
        ...(own.length > 0
          ? [
              `[ -z "$new" ] || { ${own.map((cmd) => `${cmd.replace(" -Rh", "").replace(" -R", "")} "$d"`).join("; ")}; }`,
            ]
          : []),
      );
    } else {
      const name = posix.basename(c.sources[k] as string);
      lines.push(
        intoDir || c.dest.endsWith("/")
          ? `mkdir -p "$d"; t="$d"/${sq(name)}`
          : `if [ -d "$d" ]; then t="$d"/${sq(name)}; else mkdir -p "$(dirname "$d")"; t="$d"; fi`,
        `cp -a ${src} "$t"`,
        ...fix('"$t"'),
      );
    }
  }
  return lines.join("\n");
}
