import { statSync } from "node:fs";
import path from "node:path";
import { DenvApiError, type DenvClient, extractTar, packTar, tarEntries } from "@denv/sdk";
import type { CommandSpec } from "../command.js";
import type { Context } from "../context.js";
import { CliError } from "../exit-codes.js";

/** `PROJECT/ENV:PATH` (ENV optional); a local path never starts with a bare name and a colon. */
const REMOTE = /^([a-z0-9][a-z0-9-]*(?:\/[a-z0-9][a-z0-9-]*)?):(.*)$/;

export const cp: CommandSpec = {
  name: "cp",
  summary: "copy files and folders between this machine and an environment",
  args: "SRC DEST (one of them PROJECT/ENV:PATH) [--service S] [--user U]",
  description: `
  denv cp LOCAL PROJECT/ENV:PATH    upload a file or folder
  denv cp PROJECT/ENV:PATH LOCAL    download a file or folder

As docker cp: when the destination is an existing folder (or ends with /), the source goes
into it under its own name; otherwise it is created with the destination's name. LOCAL '-'
is a tar stream on stdin (upload, extracted into PATH) or stdout (download). Files travel as
tar; uploads are checked on the host (special files are refused, protection 3), downloads
are extracted here without writing outside LOCAL (no absolute or climbing paths, nothing
through symlinks, setuid bits dropped).`,
  flags: {
    service: {
      type: "string",
      short: "s",
      value: "S",
      description: "the service (default: the agent service)",
    },
    user: {
      type: "string",
      short: "u",
      value: "U",
      description: "read or write as this user (default: the agent user)",
    },
  },
  remote: true,
  async run(ctx) {
    const [src = "", dest = ""] = ctx.args(2, 2, "SRC and DEST");
    const from = REMOTE.exec(src);
    const to = REMOTE.exec(dest);
    if ((from === null) === (to === null)) {
      throw ctx.usage("exactly one of SRC and DEST is PROJECT/ENV:PATH (e.g. quickstart/alpha:/workspace)");
    }
    const remote = (from ?? to) as RegExpExecArray;
    const env = ctx.environment(remote[1] ?? "");
    const remotePath = remote[2] ?? "";
    if (!remotePath.startsWith("/"))
      throw ctx.usage(`'${remotePath}' is not an absolute path in the container`);
    const options = {
      service: ctx.string("service"),
      user: ctx.string("user"),
    };
    return from === null
      ? await upload(ctx, ctx.client(), src, env, remotePath, options)
      : await download(ctx, ctx.client(), env, remotePath, dest, options);
  },
};

type Files = { service?: string; user?: string };

async function upload(
  ctx: Context,
  client: DenvClient,
  local: string,
  env: string,
  remotePath: string,
  files: Files,
) {
  if (local === "-") {
    const result = await client.putFiles(env, remotePath, ctx.io.stdin, files);
    ctx.print(
      { ...result, destination: `${env}:${remotePath}` },
      `extracted ${count(result)} into ${env}:${remotePath}`,
    );
    return 0;
  }
  const abs = path.resolve(ctx.io.cwd, local);
  const stat = statSync(abs, { throwIfNoEntry: false });
  if (stat === undefined) throw new CliError("not_found", `${local} does not exist`);
  const kind = await remoteKind(client, env, remotePath, files);
  const into = remotePath.endsWith("/") || kind === "directory";
  if (!into && kind === "file" && stat.isDirectory()) {
    throw new CliError("invalid_request", `cannot copy folder ${local} onto file ${env}:${remotePath}`);
  }
  const dir = into ? remotePath : path.posix.dirname(remotePath);
  const name = into ? path.basename(abs) : path.posix.basename(remotePath);
  const result = await client.putFiles(env, dir, packTar(abs, { name }), files);
  const destination = `${env}:${path.posix.join(dir, name)}`;
  ctx.print({ ...result, destination }, `copied ${local} to ${destination} (${count(result)})`);
  return 0;
}

async function download(
  ctx: Context,
  client: DenvClient,
  env: string,
  remotePath: string,
  local: string,
  files: Files,
) {
  const stream = await client.getFiles(env, remotePath, files);
  if (local === "-") {
    for await (const chunk of stream) ctx.io.stdout(chunk as Buffer);
    return 0;
  }
  const abs = path.resolve(ctx.io.cwd, local);
  const stat = statSync(abs, { throwIfNoEntry: false });
  const base = path.posix.basename(remotePath.replace(/\/+$/, "")) || ".";
  let result: { entries: number; bytes: number };
  let destination: string;
  if (stat?.isDirectory() === true) {
    result = await extractTar(stream, abs, { onSkip: (n, why) => ctx.progress(`  left out ${n}: ${why}`) });
    destination = path.join(abs, base);
  } else {
    const parent = path.dirname(abs);
    if (statSync(parent, { throwIfNoEntry: false })?.isDirectory() !== true) {
      stream.destroy();
      throw new CliError("not_found", `folder ${path.dirname(local)} does not exist`);
    }
    const name = path.basename(abs);
    const rename = (entry: string) =>
      entry === base ? name : entry.startsWith(`${base}/`) ? `${name}${entry.slice(base.length)}` : undefined;
    result = await extractTar(stream, parent, {
      mapName: rename,
      onSkip: (n, why) => ctx.progress(`  left out ${n}: ${why}`),
    });
    destination = abs;
  }
  ctx.print({ ...result, destination }, `copied ${env}:${remotePath} to ${destination} (${count(result)})`);
  return 0;
}

/**
 * Whether a path in the container is a folder, a file, or nothing. There is no stat route: the
 * first header of the path's archive says, and the rest of the download is abandoned.
 */
async function remoteKind(client: DenvClient, env: string, remotePath: string, files: Files) {
  const controller = new AbortController();
  try {
    const stream = await client.getFiles(env, remotePath, { ...files, signal: controller.signal });
    stream.on("error", () => undefined); // the abort below ends it on purpose
    try {
      for await (const { entry } of tarEntries(stream)) return entry.type;
      return "missing";
    } finally {
      stream.destroy();
    }
  } catch (err) {
    if (err instanceof DenvApiError && err.status === 404) return "missing";
    throw err;
  } finally {
    controller.abort();
  }
}

const count = (r: { entries: number; bytes: number }) =>
  `${r.entries} ${r.entries === 1 ? "entry" : "entries"}, ${r.bytes} ${r.bytes === 1 ? "byte" : "bytes"}`;
