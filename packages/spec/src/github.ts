import { z } from "zod";

/**
 * The GitHub App integration's API resources and the strings docs and tests quote: a project
 * connected to a repository deploys `alpha` on every push to its branch, with a check run.
 */

/** `OWNER/REPO` as GitHub spells it: letters, digits, `-`, `_` and `.`; not `.` or `..`. */
export const GithubRepoName = z
  .string()
  .regex(/^[A-Za-z0-9-]{1,39}\/[A-Za-z0-9._-]{1,100}$/, "expected OWNER/REPO")
  .refine((s) => !/\/\.\.?$/.test(s), "expected OWNER/REPO");

/** A git ref a deploy may name: a commit (40 or 64 hex digits) or a branch/tag name. */
export const GitRef = z
  .string()
  .min(1)
  .max(255)
  .refine(isSafeGitRef, "expected a commit id or a branch or tag name (no '..', no leading '-', no spaces)");

/** git check-ref-format's rules, plus no leading '-' (it would read as an option). */
export function isSafeGitRef(ref: string): boolean {
  if (/^[0-9a-f]{40}$|^[0-9a-f]{64}$/.test(ref)) return true;
  if (ref.startsWith("-") || ref.startsWith("/") || ref.endsWith("/") || ref.endsWith(".")) return false;
  for (const ch of ref) if (ch.charCodeAt(0) <= 0x20 || ch.charCodeAt(0) === 0x7f) return false;
  if (/[~^:?*[\\]|\.\.|@\{|\/\/|\.lock(\/|$)|(^|\/)\./.test(ref)) return false;
  return ref !== "@";
}

export const ConnectGithubRequest = z.object({
  repository: GithubRepoName,
  /** The branch whose pushes deploy alpha (default: the repository's default branch). */
  branch: z.string().optional(),
});

export const GithubConnection = z.object({
  project: z.string(),
  repository: z.string(),
  branch: z.string(),
  /** The app's installation on the repository's owner (absent once uninstalled). */
  installation_id: z.number().int().optional(),
  /** The git URL the host that builds fetches from. */
  clone_url: z.string(),
  created_at: z.string(),
});
export type GithubConnection = z.infer<typeof GithubConnection>;

/** The answer to a webhook delivery GitHub sent. */
export const GithubWebhookReply = z.object({
  delivery: z.string(),
  /** What the control plane did: a deploy, a duplicate ignored, an event ignored. */
  outcome: z.enum(["deployed", "duplicate", "ignored", "pong", "installation"]),
  deployment: z.string().optional(),
  reason: z.string().optional(),
});
export type GithubWebhookReply = z.infer<typeof GithubWebhookReply>;

/** The check run's name for an environment. */
export const checkRunName = (environment: string) => `denv / ${environment}`;

export const GithubMessages = {
  notConfigured:
    "the GitHub App is not configured: set --github-app-id, --github-private-key-file and --github-webhook-secret on denv-cp (docs/reference/config.md#github-app)",
  /** 401 to a delivery without a valid X-Hub-Signature-256. */
  badSignature: "the webhook signature (X-Hub-Signature-256) does not match: delivery refused",
  notInstalled: (repo: string) =>
    `the GitHub App is not installed on ${repo}: install it on the repository, then connect again`,
  unknownRepository: (repo: string) => `no project is connected to ${repo}`,
  otherBranch: (branch: string, connected: string) =>
    `push to ${branch} ignored: the project deploys ${connected}`,
  eventIgnored: (event: string) => `event ${event} ignored`,
  /** A git URL the host will not fetch from. */
  badGitUrl: (url: string) =>
    `refused git URL ${url}: only http(s):// URLs without credentials are fetched (no file://, ssh or other transports)`,
  redirected: (url: string) => `refused: ${url} redirected elsewhere; give the repository's own URL`,
  tooLarge: (maxBytes: number) =>
    `the repository at that commit is larger than the limit of ${maxBytes} bytes`,
} as const;
