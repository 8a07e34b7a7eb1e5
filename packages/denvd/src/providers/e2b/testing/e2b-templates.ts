import { randomBytes, randomUUID } from "node:crypto";
import { posix } from "node:path";
import { buffer } from "node:stream/consumers";
import { gunzipSync } from "node:zlib";
import tar from "tar-stream";
import { ApiError } from "./e2b-api-error.js";
import { type Engine, EngineError } from "./e2b-docker.js";
import { homeOf } from "./e2b-files.js";

/** What sandboxes of a template start from: its image and the defaults its build left. */
export interface TemplateRuntime {
  templateID: string;
  /** The name the template was built under, which the SDK reports as the sandbox's name. */
  alias?: string;
  image: string;
  /** Who runs a command or file call that names no user, and where a command runs by default. */
  user?: string;
  workdir?: string;
  /** Started in the background when a sandbox is created; creation waits for `readyCmd` to pass. */
  startCmd?: string;
  readyCmd?: string;
  cpuCount?: number;
  memoryMB?: number;
}

export interface TemplateBuildsOptions {
  engine: Engine;
  /** Labels every image and build container carries (the server's). */
  labels: Record<string, string>;
  /** Image names a build's `fromImage` may give -> local images; nothing else is accepted. */
  baseImages: Record<string, string>;
  /** The template a build's `fromTemplate` names; throws ApiError when there is none. */
  resolve: (ref: string) => TemplateRuntime;
  /** The URL the SDK PUTs an archive of files to, for an upload token. */
  uploadUrl: (token: string) => string;
}

type LogLevel = "debug" | "info" | "warn" | "error";
const LEVELS: LogLevel[] = ["debug", "info", "warn", "error"];

/** A BuildLogEntry as the API sends it; `step` is "base", "1".."n" (the request's steps), or absent. */
interface LogEntry {
  timestamp: string;
  level: LogLevel;
  message: string;
  step?: string;
}

interface Build {
  buildID: string;
  status: "waiting" | "building" | "ready" | "error";
  tags: string[];
  cpuCount?: number;
  memoryMB?: number;
  logs: LogEntry[];
  reason?: { message: string; step?: string; logEntries: LogEntry[] };
  runtime?: TemplateRuntime;
}

interface Template {
  templateID: string;
  name: string;
  builds: Map<string, Build>;
  /** Tag -> the ready build it names ("default" when a build gave no tag). */
  tags: Map<string, Build>;
}

/** One entry of an uploaded archive, its path relative to the SDK's file context. */
interface FileEntry {
  name: string;
  type: "file" | "directory" | "symlink";
  mode: number;
  data: Buffer;
  linkname?: string;
}

/** The Dockerfile a build runs, each instruction with the E2B step it belongs to. */
interface Plan {
  instructions: Array<{ text: string; step: string }>;
  /** What each step does, as its log line says it. */
  described: Map<string, string>;
  copies: Array<{ dir: string; hash: string; mode?: number }>;
  runtime: Omit<TemplateRuntime, "templateID" | "alias" | "image">;
}

/** E2B's default user, which its base layer adds to every image; builds start as them in their home. */
const DEFAULT_USER = "user";
const USER_NAME = /^[A-Za-z0-9._-]+$/;
const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;
const TAG = /^[A-Za-z0-9._-]+$/;
/** The colours the classic builder gives a step's stderr. */
// biome-ignore lint/suspicious/noControlCharactersInRegex: ANSI colour codes start with ESC.
const COLOR = /\u001b\[[0-9;]*m/g;
/** The last lines of a failed step's output that the build's error message quotes. */
const QUOTED_LINES = 20;

/**
 * E2B's template build API (the SDK's `Template.build`, build system v2) on the local engine. A
 * build's base (`fromImage` through `baseImages`, or `fromTemplate`) and steps become a Dockerfile
 * run by the engine's classic builder, with the uploaded COPY files in its context; the image is
 * tagged `denv-e2b-tpl/<templateID>:<buildID>` and carries the server's labels. As on E2B, steps run
 * as `user` in `/home/user` until a USER or WORKDIR step says otherwise (USER alone moves to the new
 * user's home), COPY gives the files to the step's user (or the current one), and the last user and
 * workdir become the defaults of the template's sandboxes. Every build runs uncached, so `force`
 * and `skipCache` always hold. A failed build leaves no image or container behind.
 */
export class TemplateBuilds {
  private readonly templates = new Map<string, Template>();
  /** Files hash -> the archive's entries; E2B keeps uploads by hash, so a rebuild skips them. */
  private readonly files = new Map<string, FileEntry[]>();
  /** Upload token -> the files hash it may upload: the double's presigned URLs. */
  private readonly uploads = new Map<string, string>();
  private readonly running = new Set<Promise<void>>();

  constructor(private readonly o: TemplateBuildsOptions) {}

  /** POST /v3/templates: the template of that name (made if new) and a build of it, waiting for steps. */
  request(body: Record<string, unknown>): object {
    const ref = body.name ?? body.alias;
    if (typeof ref !== "string" || ref === "") throw new ApiError(400, "name is required");
    if (body.minFreeDiskMb !== undefined)
      throw new ApiError(400, "minFreeDiskMb is not supported by this test double: it has no disk limits");
    const [name = "", nameTag, ...rest] = ref.split(":");
    if (!TAG.test(name) || rest.length > 0) throw new ApiError(400, `'${ref}' is not a template name`);
    const tags = [...new Set([...(nameTag ? [nameTag] : []), ...strings(body.tags, "tags")])];
    if (tags.length === 0) tags.push("default");
    const bad = tags.find((t) => !TAG.test(t));
    if (bad !== undefined) throw new ApiError(400, `'${bad}' is not a tag`);
    let t = this.byName(name);
    if (!t) {
      t = { templateID: randomBytes(10).toString("hex"), name, builds: new Map(), tags: new Map() };
      this.templates.set(t.templateID, t);
    }
    const build: Build = {
      buildID: randomUUID(),
      status: "waiting",
      tags,
      cpuCount: positive(body.cpuCount, "cpuCount"),
      memoryMB: positive(body.memoryMB, "memoryMB"),
      logs: [],
    };
    t.builds.set(build.buildID, build);
    return {
      templateID: t.templateID,
      buildID: build.buildID,
      names: [name],
      aliases: [name],
      tags,
      public: false,
    };
  }

  /** GET /templates/{id}/files/{hash}: whether those files are here, and where to PUT them. */
  uploadLink(templateID: string, hash: string): object {
    this.template(templateID);
    if (!/^[0-9a-f]{64}$/.test(hash)) throw new ApiError(400, `'${hash}' is not a files hash`);
    const token = randomBytes(16).toString("hex");
    this.uploads.set(token, hash);
    return { present: this.files.has(hash), url: this.o.uploadUrl(token) };
  }

  /** The PUT to an upload URL: a tar archive, gzipped or not, of the files one COPY step copies. */
  async upload(token: string, body: Buffer): Promise<void> {
    const hash = this.uploads.get(token);
    if (hash === undefined) throw new ApiError(403, "this upload URL is not valid (unknown or used)");
    this.uploads.delete(token);
    this.files.set(hash, await readArchive(body));
  }

  /** POST /v2/templates/{id}/builds/{buildID}: checks the steps, then builds in the background. */
  async start(templateID: string, buildID: string, body: Record<string, unknown>): Promise<void> {
    const t = this.template(templateID);
    const build = t.builds.get(buildID);
    if (!build) throw new ApiError(404, `build '${buildID}' of template '${templateID}' not found`);
    if (build.status !== "waiting") throw new ApiError(400, `build '${buildID}' has already started`);
    const plan = await this.plan(t, build, body);
    build.status = "building";
    const run = this.run(t, build, plan).finally(() => this.running.delete(run));
    this.running.add(run);
  }

  /** GET /templates/{id}/builds/{buildID}/status: TemplateBuildInfo, log entries from `logsOffset`. */
  status(templateID: string, buildID: string, q: URLSearchParams): object {
    const build = this.template(templateID).builds.get(buildID);
    if (!build) throw new ApiError(404, `build '${buildID}' of template '${templateID}' not found`);
    const level = (q.get("level") ?? "debug") as LogLevel;
    if (!LEVELS.includes(level)) throw new ApiError(400, `'${level}' is not a log level`);
    const from = Number(q.get("logsOffset") ?? 0);
    const limit = Number(q.get("limit") ?? Number.POSITIVE_INFINITY);
    const logEntries = build.logs
      .filter((e) => LEVELS.indexOf(e.level) >= LEVELS.indexOf(level))
      .slice(from, from + limit);
    return {
      templateID,
      buildID,
      status: build.status,
      logEntries,
      logs: [],
      ...(build.reason ? { reason: build.reason } : {}),
    };
  }

  /** GET /templates/aliases/{alias}: the template of that name. */
  alias(name: string): object {
    const t = this.byName(name);
    if (!t) throw new ApiError(404, `template '${name}' not found`);
    return { templateID: t.templateID, public: false };
  }

  /** The names of the templates built here and not deleted. */
  names(): string[] {
    return [...this.templates.values()].map((t) => t.name).sort();
  }

  /**
   * The runtime of a built template, by id or name with an optional `:tag` ("default" if none);
   * undefined if no template has that id or name.
   */
  find(ref: string): TemplateRuntime | undefined {
    const [key = "", tag = "default"] = ref.split(":");
    const t = this.templates.get(key) ?? this.byName(key);
    if (!t) return undefined;
    const runtime = t.tags.get(tag)?.runtime;
    if (!runtime) throw new ApiError(404, `template '${ref}' has no ready build tagged '${tag}'`);
    return runtime;
  }

  /**
   * DELETE /templates/{id} of a built template: forgets it and untags its images (a sandbox still
   * running one keeps its layers until the server closes). False if no template has that id or name.
   */
  async delete(ref: string): Promise<boolean> {
    const t = this.templates.get(ref) ?? this.byName(ref);
    if (!t) return false;
    this.templates.delete(t.templateID);
    for (const b of t.builds.values())
      if (b.runtime)
        await ignoreMissing(
          this.o.engine.call("DELETE", `/images/${encodeURIComponent(b.runtime.image)}?force=1`),
        );
    return true;
  }

  /** Waits for the builds under way, so that nothing they make appears after a cleanup. */
  async settle(): Promise<void> {
    await Promise.allSettled([...this.running]);
  }

  private template(templateID: string): Template {
    const t = this.templates.get(templateID);
    if (!t) throw new ApiError(404, `template '${templateID}' not found`);
    return t;
  }

  private byName(name: string): Template | undefined {
    return [...this.templates.values()].find((t) => t.name === name);
  }

  /** The Dockerfile of a TemplateBuildStartV2, or an ApiError naming what this double refuses. */
  private async plan(t: Template, build: Build, body: Record<string, unknown>): Promise<Plan> {
    if (body.fromImageRegistry !== undefined)
      throw new ApiError(
        400,
        "fromImageRegistry is not supported by this test double: it never pulls; map the image to a local one in baseImages",
      );
    const fromImage = nonEmpty(body.fromImage);
    const fromTemplate = nonEmpty(body.fromTemplate);
    if ((fromImage === undefined) === (fromTemplate === undefined))
      throw new ApiError(400, "exactly one of fromImage and fromTemplate must be given");
    const instructions: Plan["instructions"] = [];
    const described = new Map<string, string>();
    const copies: Plan["copies"] = [];
    const add = (step: string, text: string) => instructions.push({ step, text });
    const labels = {
      ...this.o.labels,
      "ai.denv.e2b.template": t.templateID,
      "ai.denv.e2b.build": build.buildID,
    };
    const labelLine = `LABEL ${Object.entries(labels)
      .map(([k, v]) => `${k}=${word(v)}`)
      .join(" ")}`;
    let user = DEFAULT_USER;
    let workdir = homeOf(user);
    let workdirSet = false;
    if (fromImage !== undefined) {
      const image = this.o.baseImages[fromImage];
      if (image === undefined)
        throw new ApiError(
          400,
          `fromImage '${fromImage}' is not one of this test double's baseImages ` +
            `(${Object.keys(this.o.baseImages).join(", ") || "none"}); it never pulls`,
        );
      if (!(await this.o.engine.hasImage(image)))
        throw new ApiError(
          400,
          `baseImages maps '${fromImage}' to '${image}', which the engine does not have`,
        );
      described.set("base", `FROM ${fromImage}`);
      add("base", `FROM ${image}`);
      add("base", labelLine);
      add("base", "USER root");
      // E2B's base layer: the default user, in every template.
      add(
        "base",
        `RUN ${JSON.stringify(["/bin/sh", "-c", `id -u ${DEFAULT_USER} >/dev/null 2>&1 || useradd -m -s /bin/bash ${DEFAULT_USER}`])}`,
      );
    } else {
      const base = this.o.resolve(fromTemplate ?? "");
      described.set("base", `FROM template ${fromTemplate}`);
      add("base", `FROM ${base.image}`);
      add("base", labelLine);
      user = base.user ?? user;
      workdirSet = base.workdir !== undefined;
      workdir = base.workdir ?? homeOf(user);
    }
    add("base", `USER ${user}`);
    add("base", `WORKDIR ${word(workdir)}`);

    const steps = Array.isArray(body.steps) ? (body.steps as unknown[]) : [];
    for (const [i, raw] of steps.entries()) {
      const step = String(i + 1);
      const s = (raw ?? {}) as { type?: unknown; args?: unknown; filesHash?: unknown };
      const args = strings(s.args, `step ${step}'s args`);
      const refuse = (why: string): never => {
        throw new ApiError(400, `step ${step} (${String(s.type)} ${args.join(" ")}): ${why}`);
      };
      const userName = (name: string) =>
        USER_NAME.test(name) ? name : refuse(`'${name}' is not a user name`);
      described.set(step, `${String(s.type)} ${args.filter((a) => a !== "").join(" ")}`);
      switch (s.type) {
        case "RUN": {
          const [cmd, as] = args;
          if (!cmd) refuse("a command is required");
          const runAs = userName(as || user);
          if (runAs !== user) add(step, `USER ${runAs}`);
          add(step, `RUN ${JSON.stringify(["/bin/bash", "-c", cmd])}`);
          if (runAs !== user) add(step, `USER ${user}`);
          break;
        }
        case "COPY": {
          const [src = "", dest = "", owner, mode] = args;
          if (src === "" || dest === "") refuse("a source and a destination are required");
          const hash = typeof s.filesHash === "string" ? s.filesHash : "";
          if (!this.files.has(hash)) refuse(`its files (hash '${hash}') were not uploaded`);
          if (posix.isAbsolute(src) || posix.normalize(src).startsWith(".."))
            refuse("the source must lie inside the file context");
          if (mode && !/^[0-7]{3,4}$/.test(mode)) refuse(`'${mode}' is not an octal mode`);
          const dir = `steps/${step}`;
          copies.push({ dir, hash, mode: mode ? Number.parseInt(mode, 8) : undefined });
          add(step, `COPY --chown=${userName(owner || user)} ${word(posix.join(dir, src))} ${word(dest)}`);
          break;
        }
        case "WORKDIR": {
          const [dir] = args;
          if (!dir) refuse("a directory is required");
          workdir = posix.resolve(workdir, dir ?? "");
          workdirSet = true;
          add(step, `WORKDIR ${word(workdir)}`);
          break;
        }
        case "USER": {
          user = userName(args[0] ?? "");
          add(step, `USER ${user}`);
          if (!workdirSet) {
            workdir = homeOf(user);
            add(step, `WORKDIR ${word(workdir)}`);
          }
          break;
        }
        case "ENV": {
          if (args.length === 0 || args.length % 2 !== 0) refuse("names and values come in pairs");
          const pairs: string[] = [];
          for (let k = 0; k < args.length; k += 2) {
            const name = args[k] ?? "";
            if (!ENV_NAME.test(name)) refuse(`'${name}' is not a variable name`);
            pairs.push(`${name}=${word(args[k + 1] ?? "")}`);
          }
          add(step, `ENV ${pairs.join(" ")}`);
          break;
        }
        default:
          refuse("this test double builds only RUN, COPY, WORKDIR, USER and ENV steps");
      }
    }
    const command = (field: string) => {
      const v = body[field];
      if (v === undefined || v === null || v === "") return undefined;
      if (typeof v !== "string") throw new ApiError(400, `${field} must be a string`);
      return v;
    };
    return {
      instructions,
      described,
      copies,
      runtime: { user, workdir, startCmd: command("startCmd"), readyCmd: command("readyCmd") },
    };
  }

  /** Runs a planned build to its end; never rejects: a failure is the build's `error` status. */
  private async run(t: Template, build: Build, plan: Plan): Promise<void> {
    const image = `denv-e2b-tpl/${t.templateID}:${build.buildID}`;
    const total = plan.described.size - 1;
    const log = (message: string, step?: string, level: LogLevel = "info") => {
      const entry: LogEntry = { timestamp: new Date().toISOString(), level, message, step };
      build.logs.push(entry);
      return entry;
    };
    const output = new Map<string, LogEntry[]>();
    let current: string | undefined;
    let partial = "";
    const line = (text: string) => {
      const header = /^Step (\d+)\/\d+ : /.exec(text);
      if (header) {
        const step = plan.instructions[Number(header[1]) - 1]?.step;
        if (step !== undefined && step !== current) {
          current = step;
          const what = plan.described.get(step) ?? "";
          log(step === "base" ? `[base] ${what}` : `[step ${step}/${total}] ${what}`, step);
        }
        return;
      }
      // The classic builder's own bookkeeping, not the steps' output.
      if (
        text.trim() === "" ||
        /^( ---> |Removing intermediate container |Successfully (built|tagged) )/.test(text)
      )
        return;
      const entry = log(text, current);
      const lines = output.get(current ?? "") ?? [];
      lines.push(entry);
      output.set(current ?? "", lines);
    };
    log(`Building template ${t.name} (${t.templateID}), build ${build.buildID}`);
    let error: string;
    try {
      const result = await this.o.engine.build(await this.context(plan), image, (colored) => {
        const text = colored.replace(COLOR, "");
        if (/^Step \d+\/\d+ : /.test(text) && partial !== "") {
          line(partial);
          partial = "";
        }
        const parts = (partial + text).split("\n");
        partial = parts.pop() ?? "";
        for (const p of parts) line(p.replace(/\r$/, ""));
      });
      if (partial !== "") line(partial);
      if (result.ok) {
        build.runtime = {
          templateID: t.templateID,
          alias: t.name,
          image,
          ...plan.runtime,
          cpuCount: build.cpuCount,
          memoryMB: build.memoryMB,
        };
        for (const tag of build.tags) t.tags.set(tag, build);
        log(`Template ${t.name} built: tags ${build.tags.join(", ")}`);
        build.status = "ready";
        return;
      }
      error = result.error.trim();
    } catch (e) {
      error = String(e);
    }
    const failed = current ?? "base";
    const lines = output.get(failed) ?? [];
    const quoted = lines.slice(-QUOTED_LINES).map((e) => e.message);
    const message = [`step ${failed} (${plan.described.get(failed)}) failed: ${error}`, ...quoted].join("\n");
    log(message, failed, "error");
    try {
      await this.removeBuild(build.buildID);
    } catch (e) {
      log(`removing what the failed build left failed: ${String(e)}`, undefined, "error");
    }
    // The status turns last, so a client that sees the error finds nothing of the build left.
    build.reason = { message, step: failed, logEntries: lines };
    build.status = "error";
  }

  /** The build context: the Dockerfile, and each COPY step's files under `steps/<n>/`. */
  private async context(plan: Plan): Promise<Buffer> {
    const pack = tar.pack();
    pack.entry({ name: "Dockerfile" }, `${plan.instructions.map((i) => i.text).join("\n")}\n`);
    for (const c of plan.copies)
      for (const e of this.files.get(c.hash) ?? []) {
        const name = posix.join(c.dir, e.name);
        if (e.type === "directory") pack.entry({ name, type: "directory", mode: e.mode });
        else if (e.type === "symlink") pack.entry({ name, type: "symlink", linkname: e.linkname });
        else pack.entry({ name, mode: c.mode ?? e.mode, size: e.data.length }, e.data);
      }
    pack.finalize();
    return buffer(pack);
  }

  /** Removes the containers and images of one build. */
  private async removeBuild(buildID: string): Promise<void> {
    const filter = encodeURIComponent(JSON.stringify({ label: [`ai.denv.e2b.build=${buildID}`] }));
    const engine = this.o.engine;
    const containers = await engine.call<Array<{ Id: string }>>(
      "GET",
      `/containers/json?all=1&filters=${filter}`,
    );
    for (const c of containers) await ignoreMissing(engine.call("DELETE", `/containers/${c.Id}?force=1&v=1`));
    await engine.removeImages(`ai.denv.e2b.build=${buildID}`);
  }
}

/** Reads an uploaded archive; gzip is recognised by its magic bytes, as the SDK may send either. */
async function readArchive(body: Buffer): Promise<FileEntry[]> {
  const data = body[0] === 0x1f && body[1] === 0x8b ? gunzipSync(body) : body;
  const extract = tar.extract();
  extract.end(data);
  const entries: FileEntry[] = [];
  for await (const entry of extract) {
    const { name: raw, type, mode = 0o644, linkname } = entry.header;
    const name = posix.normalize(raw);
    if (posix.isAbsolute(name) || name.startsWith(".."))
      throw new ApiError(400, `the archive's entry '${raw}' lies outside its root`);
    const content = await buffer(entry);
    if (type === "file" || type === "directory" || type === "symlink")
      entries.push({ name, type, mode, data: content, linkname: linkname ?? undefined });
    else throw new ApiError(400, `the archive's entry '${raw}' is a ${type}, which COPY does not take`);
  }
  return entries;
}

/** A Dockerfile word in double quotes: the builder then takes `$`, `"` and `\` literally. */
function word(s: string): string {
  if (/[\r\n]/.test(s)) throw new ApiError(400, `'${s}': line breaks are not supported here`);
  return `"${s.replace(/[\\"$]/g, "\\$&")}"`;
}

function strings(v: unknown, what: string): string[] {
  if (v === undefined || v === null) return [];
  if (!Array.isArray(v) || v.some((x) => typeof x !== "string"))
    throw new ApiError(400, `${what} must be a list of strings`);
  return v as string[];
}

function nonEmpty(v: unknown): string | undefined {
  return typeof v === "string" && v !== "" ? v : undefined;
}

function positive(v: unknown, what: string): number | undefined {
  if (v === undefined || v === null) return undefined;
  if (typeof v !== "number" || !Number.isInteger(v) || v <= 0)
    throw new ApiError(400, `${what} must be a positive integer`);
  return v;
}

async function ignoreMissing(call: Promise<unknown>): Promise<void> {
  await call.catch((e: unknown) => {
    if (!(e instanceof EngineError && e.status === 404)) throw e;
  });
}
