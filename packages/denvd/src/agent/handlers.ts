import { type CommandKind, DenvError, parseEnvRef, parseVersionRef } from "@denv/spec";
import type { CommandContext, Handler, HandlerResult, Payload } from "./command-context.js";
import { throwIfAborted } from "./command-context.js";
import { execCommand } from "./exec-handler.js";
import { filesGet, filesPut } from "./files-handlers.js";
import { fetchGitSource, type GitSource } from "./git-source.js";
import { type ProjectSource, receiveSource } from "./source.js";
import { versionReceive, versionSend } from "./transfer-handlers.js";
import { tunnel } from "./tunnel.js";

/**
 * One handler per command kind: payload (already validated) -> Runtime call -> result, typed by
 * spec's result schema of its kind (the agent checks it with that schema before sending it).
 * Handlers pass the command id as `command`, so that everything they create in Docker carries
 * it (ai.denv.command) and a crash can be reconciled from the labels.
 */

async function deploy(p: Payload<"env.deploy">, ctx: CommandContext): Promise<HandlerResult<"env.deploy">> {
  const phases = ctx.phases(true);
  phases.start("resolve source");
  const git = p.git ? await gitSource(p.git, ctx) : undefined;
  await using src = git ?? (await uploadedSource(p.source_stream, ctx));
  phases.end("resolve source", {
    source: { entries: src.entries, bytes: src.bytes, compressed: src.compressed },
    ...(git && p.git ? { git: { url: p.git.url, commit: git.commit, fetched_bytes: git.fetchedBytes } } : {}),
  });
  ctx.line(
    `source: ${src.entries} entries, ${src.bytes} bytes${src.compressed ? " (gzip)" : ""}${git ? ` (git ${git.commit})` : ""}`,
  );
  // Awaited here: the source directory is removed when this function returns.
  return await ctx.runtime.deploy({
    project: p.project,
    environment: p.environment,
    projectDir: src.dir,
    ...(p.compose_file ? { composeFile: p.compose_file } : {}),
    // Compose interpolation sees no variables of denvd's own process: a host's environment
    // must not leak into (or change) what gets deployed.
    env: {},
    command: ctx.id,
    onPhase: phases,
    kind: p.kind,
  });
}

async function uploadedSource(streamId: string | undefined, ctx: CommandContext): Promise<ProjectSource> {
  if (streamId === undefined) throw new DenvError("invalid_request", "env.deploy needs source_stream or git");
  const { inbound } = ctx.streams.open(streamId);
  const onAbort = () => inbound.fail(`stream ${streamId}: ${String(ctx.signal.reason)}`);
  ctx.signal.addEventListener("abort", onAbort, { once: true });
  let source: ProjectSource;
  try {
    source = await receiveSource(inbound, ctx.tmpDir);
  } catch (err) {
    throwIfAborted(ctx.signal);
    throw err;
  } finally {
    ctx.signal.removeEventListener("abort", onAbort);
  }
  // The source is here: the deploy no longer depends on the connection.
  ctx.streams.close(streamId);
  return source;
}

async function gitSource(
  g: NonNullable<Payload<"env.deploy">["git"]>,
  ctx: CommandContext,
): Promise<GitSource> {
  ctx.line(`fetching ${g.ref} from ${g.url}`);
  try {
    return await fetchGitSource(
      { url: g.url, ref: g.ref, authorization: g.authorization, maxBytes: g.max_bytes },
      ctx.tmpDir,
      ctx.signal,
    );
  } catch (err) {
    throwIfAborted(ctx.signal);
    throw err;
  }
}

function fork(p: Payload<"env.fork">, ctx: CommandContext): Promise<HandlerResult<"env.fork">> {
  return ctx.runtime.fork(p.version, { name: p.name, command: ctx.id, onPhase: ctx.phases(true) });
}

/**
 * Rollback: the environment is replaced by a fork of `version` under the same name. Names are
 * baked into Docker objects, so the old environment is destroyed first and the fork takes its
 * name; the version is checked before anything is destroyed. If the fork then fails, the
 * environment is gone (the result says so) and the version is still there to fork again.
 */
async function restore(
  p: Payload<"env.restore">,
  ctx: CommandContext,
): Promise<HandlerResult<"env.restore">> {
  const { project, environment } = parseEnvRef(p.environment);
  const version = await ctx.runtime.version(p.version);
  if (version.project !== project) {
    throw new DenvError(
      "invalid_request",
      `version ${p.version} belongs to project ${version.project}, not to ${project}`,
    );
  }
  throwIfAborted(ctx.signal);
  if (await ctx.runtime.has(p.environment)) {
    await ctx.runtime.destroy(p.environment);
    ctx.line(`destroyed ${p.environment}; forking ${p.version} in its place`);
  }
  try {
    return await ctx.runtime.fork(p.version, {
      name: environment,
      command: ctx.id,
      onPhase: ctx.phases(true),
    });
  } catch (err) {
    const e = err instanceof DenvError ? err : new DenvError("internal", (err as Error).message);
    throw new DenvError(
      e.code,
      `${e.message} (${p.environment} was destroyed for the restore; fork ${p.version} again)`,
      e.details,
    );
  }
}

async function snapshot(
  p: Payload<"env.snapshot">,
  ctx: CommandContext,
): Promise<HandlerResult<"env.snapshot">> {
  // Not interruptible: the environment is frozen in the middle, and thawing is the snapshot's
  // own last step.
  return ctx.runtime.snapshot(p.environment, {
    command: ctx.id,
    onPhase: ctx.phases(false),
    ...(p.number !== undefined ? { number: p.number } : {}),
  });
}

const handlerTable: { [K in CommandKind]: Handler<K> } = {
  "env.deploy": deploy,
  "env.exec": execCommand,
  "env.files.put": filesPut,
  "env.files.get": filesGet,
  "env.snapshot": snapshot,
  "env.fork": fork,
  "env.restore": restore,
  "env.stop": (p, ctx) => ctx.runtime.stop(p.environment, { onPhase: ctx.phases(false) }),
  "env.start": (p, ctx) => ctx.runtime.start(p.environment, { onPhase: ctx.phases(false) }),
  "env.destroy": async (p, ctx) => {
    await ctx.runtime.destroy(p.environment, { onPhase: ctx.phases(false) });
    return { environment: p.environment, destroyed: true };
  },
  "env.probe_egress": (p, ctx) => ctx.runtime.probeEgress(p.environment),
  // The episode's snapshot comes with the grade: a version like any other, the cp records it.
  "env.verify": (p, ctx) =>
    ctx.runtime.verify(p.environment, {
      command: ctx.id,
      onPhase: ctx.phases(false),
      ...(p.number !== undefined ? { number: p.number } : {}),
      ...(p.version !== undefined ? { smokeVersion: p.version } : {}),
    }),
  "env.logs": (p, ctx) => ctx.runtime.logs(p.environment, p.service, p.tail),
  "env.connect": tunnel,
  "version.delete": async (p, ctx) => {
    parseVersionRef(p.version);
    await ctx.runtime.deleteVersion(p.version);
    return { version: p.version, deleted: true };
  },
  "version.send": versionSend,
  "version.receive": versionReceive,
  "host.gc": (_p, ctx) => ctx.runtime.gc(),
};

export function handlerFor<K extends CommandKind>(kind: K): Handler<K> {
  return handlerTable[kind];
}

/**
 * Kinds that stop when their signal is aborted (cancel, deadline, lost stream). The others run
 * to the end and report what happened: they are short, or unsafe to stop halfway.
 */
export const INTERRUPTIBLE = new Set<CommandKind>([
  "env.deploy",
  "env.fork",
  "env.restore",
  "env.exec",
  "env.files.put",
  "env.files.get",
  "env.connect",
  "version.send",
  "version.receive",
]);
