import { z } from "zod";

/**
 * An episode's command log (docs/how-to/replay.md): what the control plane asked of a fork or a
 * sandbox through the exec and files routes, and what its host answered, step by step; and a
 * replay of that log on a fresh fork. Env values are never kept (their keys are); stdin and
 * uploaded tars are kept up to `keptBytesPerStep` so that a replay can send them again.
 */
export const EPISODE_LOG = {
  /** Steps kept per environment; the steps after these are counted, not kept, and the log cannot be replayed. */
  maxSteps: 1000,
  /** Stdin or an upload's tar bigger than this is kept as its digest only (a replay refuses the step). */
  keptBytesPerStep: 64 * 1024,
  /** GET .../episode: steps per page when the request gives no `limit`, and the most it may ask for. */
  page: { default: 100, max: 1000 },
} as const;

export const EpisodeExec = z.object({
  cmd: z.array(z.string()).optional(),
  shell: z.string().optional(),
  service: z.string().optional(),
  user: z.string().optional(),
  cwd: z.string().optional(),
  /** The names of the variables the request set; their values are never kept. */
  env_keys: z.array(z.string()),
  timeout: z.number().optional(),
  output_limit: z.number().int().optional(),
  /** Run with a terminal (stderr merged into stdout). */
  tty: z.boolean().optional(),
  /** sha256 (hex) of the stdin sent, and its length; absent: none was sent. */
  stdin_sha256: z.string().optional(),
  stdin_bytes: z.number().int().nonnegative(),
  /** The stdin bytes are kept in the log (so a replay can send them); false: only the digest. */
  stdin_kept: z.boolean(),
  /** Run with stdin and output streamed over the WebSocket route. */
  streamed: z.boolean(),
});

export const EpisodeFiles = z.object({
  path: z.string(),
  service: z.string().optional(),
  user: z.string().optional(),
  /** sha256 (hex) of the tar the cp streamed to the host, and its length. */
  sha256: z.string(),
  bytes: z.number().int().nonnegative(),
  kept: z.boolean(),
});

/** What the host answered, checked against what was asked (lengths the cp counted itself). */
export const EpisodeOutcome = z.object({
  exit_code: z.number().int().optional(),
  stdout_sha256: z.string().optional(),
  stderr_sha256: z.string().optional(),
  stdout_bytes: z.number().int().optional(),
  stderr_bytes: z.number().int().optional(),
  timed_out: z.boolean().optional(),
  truncated: z.boolean().optional(),
  /** files put: what the host extracted. */
  entries: z.number().int().optional(),
});
export type EpisodeOutcome = z.infer<typeof EpisodeOutcome>;

export const EpisodeStep = z.object({
  seq: z.number().int().positive(),
  kind: z.enum(["exec", "files.put"]),
  /** When the cp sent it, and how long until the host's answer. */
  started_at: z.string(),
  duration_ms: z.number().int().nonnegative(),
  /** The API token that asked (its id). */
  token: z.string(),
  exec: EpisodeExec.optional(),
  files: EpisodeFiles.optional(),
  result: EpisodeOutcome.optional(),
  /** The step failed before the command ran to an answer (refused, host offline, a wrong answer). */
  error: z.object({ code: z.string(), message: z.string() }).optional(),
});
export type EpisodeStep = z.infer<typeof EpisodeStep>;

/**
 * One page of GET /v1/environments/:project/:env/episode, by seq. `next`: pass it as `after` for
 * the next page. `dropped`: steps run after the log was full (not kept).
 */
export const EpisodeLog = z.object({
  environment: z.string(),
  /** The version the episode started from (the fork's parent version). */
  started_from: z.string().optional(),
  total: z.number().int().nonnegative(),
  dropped: z.number().int().nonnegative(),
  steps: z.array(EpisodeStep),
  next: z.number().int().optional(),
});
export type EpisodeLog = z.infer<typeof EpisodeLog>;

export const ReplayRequest = z.object({
  /** `PROJECT@vN` or `N`; default: the version the episode started from. */
  from: z.string().optional(),
  /** The replayed fork's name (default `replay-XXXXXX`). */
  name: z.string().optional(),
  /** Values of the env keys the log's steps set (the log keeps only their names). */
  env: z.record(z.string(), z.string()).optional(),
});

export const ReplayStep = z.object({
  seq: z.number().int().positive(),
  kind: z.enum(["exec", "files.put"]),
  /** `same`: exit code and output digests as recorded; `diverged`: `differs` says which. */
  status: z.enum(["same", "diverged"]),
  differs: z.array(z.enum(["exit_code", "stdout", "stderr", "entries", "error"])),
  recorded: EpisodeOutcome,
  replayed: EpisodeOutcome,
  error: z.object({ code: z.string(), message: z.string() }).optional(),
});
export type ReplayStep = z.infer<typeof ReplayStep>;

export const ReplayResponse = z.object({
  /** The episode that was replayed. */
  environment: z.string(),
  version: z.string(),
  /** The fresh fork the log ran on (verify it like any other: denv verify FORK). */
  fork: z.string(),
  steps: z.array(ReplayStep),
  /** The first step that diverged. */
  diverged_at: z.number().int().optional(),
  diverged: z.number().int().nonnegative(),
  duration_ms: z.number().int().nonnegative(),
});
export type ReplayResponse = z.infer<typeof ReplayResponse>;

/** A replay the cp kept: who ran it, on which fork, and each step's status (no output bytes). */
export const ReplaySummary = z.object({
  id: z.string(),
  /** The episode environment that was replayed (its id and name). */
  environment: z.string(),
  environment_name: z.string(),
  /** The fresh fork the log ran on (its name; it may have been destroyed since). */
  fork: z.string(),
  version: z.string(),
  created_at: z.string(),
  /** The id of the token that asked for the replay. */
  token_id: z.string(),
  diverged: z.number().int().nonnegative(),
  diverged_at: z.number().int().optional(),
  steps: z.array(
    z.object({
      seq: z.number().int().positive(),
      kind: z.enum(["exec", "files.put"]),
      status: z.enum(["same", "diverged"]),
      differs: z.array(z.enum(["exit_code", "stdout", "stderr", "entries", "error"])),
    }),
  ),
});
export type ReplaySummary = z.infer<typeof ReplaySummary>;

/** An episode's kept replays, newest first. */
export const ReplayList = z.object({ replays: z.array(ReplaySummary) });
export type ReplayList = z.infer<typeof ReplayList>;

/** The replay's refusals, before anything is forked. */
export const ReplayMessages = {
  noVersion: (env: string) =>
    `environment ${env} did not start from a version (it is no fork): give --from VERSION to replay its log`,
  empty: (env: string) => `environment ${env} has no steps in its episode log: nothing to replay`,
  tooLong: (env: string, kept: number, dropped: number) =>
    `the episode log of ${env} is too long to replay: ${kept} steps kept (the most a log keeps), ${dropped} more run after it was full`,
  stdinNotKept: (seq: number, bytes: number) =>
    `step ${seq} cannot be replayed: its stdin (${bytes} bytes) was over ${EPISODE_LOG.keptBytesPerStep} bytes, so only its digest was kept`,
  filesNotKept: (seq: number, bytes: number) =>
    `step ${seq} cannot be replayed: its upload (${bytes} bytes) was over ${EPISODE_LOG.keptBytesPerStep} bytes, so only its digest was kept`,
  missingEnv: (seq: number, keys: readonly string[]) =>
    `step ${seq} set ${keys.join(", ")}, whose values the log does not keep: pass them with --env KEY=VALUE`,
} as const;
