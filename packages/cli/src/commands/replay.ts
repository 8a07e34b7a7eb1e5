import type { EpisodeStep, ReplayResponse } from "@denv/spec";
import type { CommandSpec } from "../command.js";
import { fields, table, when } from "../format.js";

export const replay: CommandSpec = {
  name: "replay",
  summary: "replay an episode's command log on a fresh fork, step by step",
  args: "PROJECT/ENV [--from VERSION] [--name NAME] [-e K=V]...",
  description: `
Forks the version the episode started from (or --from) as a new environment and runs the
episode's steps on it in order, as the same users in the same services: each exec (with the
stdin the log kept) and each files put. Every step is compared with what was recorded: exit
code, stdout and stderr digests, entries extracted. The log keeps env keys, never their
values: give each with -e K=V. Prints each step and the replayed fork (verify it with denv
verify FORK); --json prints the ReplayResponse. Exits 0 when no step diverged, 1 otherwise.`,
  flags: {
    from: {
      type: "string",
      value: "VERSION",
      description: "fork this version (default: the one the episode started from)",
    },
    name: { type: "string", value: "NAME", description: "the replayed fork's name (default replay-XXXXXX)" },
    env: {
      type: "string",
      short: "e",
      value: "K=V",
      multiple: true,
      description: "the value of an env key the log's steps set (repeatable)",
    },
  },
  remote: true,
  async run(ctx) {
    const [ref = ""] = ctx.args(1, 1, "PROJECT/ENV");
    const env: Record<string, string> = {};
    for (const pair of ctx.strings("env")) {
      const eq = pair.indexOf("=");
      if (eq <= 0) throw ctx.usage(`-e takes K=V, not '${pair}'`);
      env[pair.slice(0, eq)] = pair.slice(eq + 1);
    }
    const from = ctx.string("from");
    const name = ctx.string("name");
    const result = await ctx.client().replay(ctx.environment(ref), {
      ...(from !== undefined ? { from } : {}),
      ...(name !== undefined ? { name } : {}),
      ...(Object.keys(env).length > 0 ? { env } : {}),
    });
    ctx.print(result, () => replayText(result));
    return result.diverged === 0 ? 0 : 1;
  },
};

export function replayText(r: ReplayResponse): string {
  const head = fields([
    ["episode", r.environment],
    ["version", r.version],
    ["fork", r.fork],
    ["steps", r.steps.length],
    ["diverged", r.diverged === 0 ? "none" : `${r.diverged}, first at step ${r.diverged_at}`],
  ]);
  const rows = r.steps.map((s) => [
    s.seq,
    s.kind,
    s.status,
    s.recorded.exit_code,
    s.replayed.exit_code,
    s.differs.join(",") || undefined,
    s.error?.message,
  ]);
  return `${head}\n\n${table(["STEP", "KIND", "STATUS", "EXIT", "NOW", "DIFFERS", "ERROR"], rows, "no steps")}`;
}

export const replays: CommandSpec = {
  name: "replays",
  summary: "list an episode's kept replays: each fork, its version and where it diverged",
  args: "PROJECT/ENV",
  description: `
Lists the replays the control plane kept of an episode, newest first: when, the replayed fork
(an environment of the project, to verify or destroy like any other), the version it started
from, and how many steps diverged (the first one's seq). --json prints the ReplayList, with
each step's status and what differs. The replays go with the episode when it is destroyed.`,
  remote: true,
  async run(ctx) {
    const [ref = ""] = ctx.args(1, 1, "PROJECT/ENV");
    const list = await ctx.client().replays(ctx.environment(ref));
    ctx.print({ replays: list }, () =>
      table(
        ["ID", "CREATED", "FORK", "VERSION", "STEPS", "DIVERGED"],
        list.map((r) => [
          r.id,
          when(r.created_at),
          r.fork,
          r.version,
          r.steps.length,
          r.diverged === 0 ? "none" : `${r.diverged}, first at step ${r.diverged_at}`,
        ]),
        "no replays",
      ),
    );
    return 0;
  },
};

export const episode: CommandSpec = {
  name: "episode",
  summary: "show an episode's command log: each exec and files put, with its digests",
  args: "PROJECT/ENV [--after SEQ] [--limit N]",
  description: `
Lists the steps the control plane recorded for a fork or a sandbox: what was run (argv or
shell, service, user), when, its exit code and output digests (sha256, first 12 hex digits
here; --json prints the EpisodeLog, whole digests, env keys and stdin digests). Pages by seq:
--after takes the last seq of the page before.`,
  flags: {
    after: { type: "string", value: "SEQ", description: "list the steps after this one" },
    limit: { type: "string", value: "N", description: "at most N steps (default 100)" },
  },
  remote: true,
  async run(ctx) {
    const [ref = ""] = ctx.args(1, 1, "PROJECT/ENV");
    const after = ctx.int("after");
    const limit = ctx.int("limit", 1);
    const log = await ctx.client().episodeLog(ctx.environment(ref), {
      ...(after !== undefined ? { after } : {}),
      ...(limit !== undefined ? { limit } : {}),
    });
    ctx.print(log, () =>
      [
        fields([
          ["episode", log.environment],
          ["started from", log.started_from],
          ["steps", log.total],
          ["dropped", log.dropped > 0 ? `${log.dropped} (run after the log was full)` : undefined],
          ["next", log.next === undefined ? undefined : `--after ${log.next}`],
        ]),
        "",
        table(
          ["SEQ", "KIND", "WHAT", "USER", "EXIT", "STDOUT", "STARTED", "MS"],
          log.steps.map((s) => [
            s.seq,
            s.kind,
            what(s),
            s.exec?.user ?? s.files?.user,
            s.result?.exit_code ?? s.error?.code,
            s.result?.stdout_sha256?.slice(0, 12),
            when(s.started_at),
            s.duration_ms,
          ]),
          "no steps",
        ),
      ].join("\n"),
    );
    return 0;
  },
};

function what(s: EpisodeStep): string {
  if (s.files) return `put ${s.files.path} (${s.files.bytes} bytes)`;
  const x = s.exec;
  if (!x) return "";
  const cmd = x.shell !== undefined ? `sh -c ${JSON.stringify(x.shell)}` : (x.cmd ?? []).join(" ");
  const shown = cmd.length > 60 ? `${cmd.slice(0, 57)}...` : cmd;
  return x.stdin_bytes > 0 ? `${shown} < ${x.stdin_bytes} bytes` : shown;
}
