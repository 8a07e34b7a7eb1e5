import { homedir } from "node:os";
import { join } from "node:path";
import { z } from "zod";

/**
 * denv-cp's configuration: one schema for flags and environment variables (flags win), parsed
 * once in main.ts. startControlPlane() takes the same schema's input, so `denv up` and tests
 * configure the cp exactly as the binary does. docs/reference/config.md lists every setting.
 */

const NumberSetting = (min: number) => z.coerce.number().int().min(min);

/** How far placement may commit a host's capacity: 1 is exactly what it has. */
const Ratio = z.coerce.number().min(0.1).max(100);

const CommaList = z
  .union([z.string(), z.array(z.string())])
  .transform((v) => (Array.isArray(v) ? v : v.split(",")).map((s) => s.trim()).filter((s) => s !== ""));

/** A credential key: base64 of exactly 32 bytes (openssl rand -base64 32). */
const CredentialKey = z
  .string()
  .refine(
    (v) => /^[A-Za-z0-9+/]{43}=$/.test(v.trim()),
    "expected 32 bytes in base64 (openssl rand -base64 32)",
  );

export const CpConfig = z.object({
  /** host:port to listen on; port 0 picks a free port. */
  listen: z
    .string()
    .regex(/^(\[[0-9a-fA-F:]+\]|[^:\s]+):\d+$/, "expected HOST:PORT")
    .default("127.0.0.1:8420"),
  dataDir: z
    .string()
    .min(1)
    .default(join(homedir(), ".local", "share", "denv", "cp")),
  /** A SQLite file path (default <data-dir>/denv.db) or a postgres:// URL. */
  databaseUrl: z.string().min(1).optional(),
  /** The URL hosts and clients reach the cp at (default http://<listen>). */
  publicUrl: z.url().optional(),
  /** Allowed browser origins for CORS; empty: CORS off. */
  corsOrigins: CommaList.default([]),
  /** The dashboard's built files, served at `/` (default: packages/web/dist beside this package). */
  webDir: z.string().min(1).optional(),
  /** Where the first start writes the admin token (mode 0600). */
  adminTokenFile: z.string().min(1).optional(),
  sandboxSweepMs: NumberSetting(100).default(30_000),
  /** Versions kept per project by the retention policy (0: keep all). */
  retainVersions: NumberSetting(0).default(20),
  /** How long one host command of a deployment may take. */
  commandTimeoutMs: NumberSetting(1_000).default(30 * 60_000),
  /** After a restart, how long a resumed deployment waits for its host's answer. */
  resumeTimeoutMs: NumberSetting(100).default(10 * 60_000),
  /** Largest deploy upload accepted. */
  maxSourceBytes: NumberSetting(1).default(4 * 1024 ** 3),
  logLevel: z.enum(["debug", "info", "warn", "error", "silent"]).default("info"),
  /**
   * Placement commits at most capacity x ratio of a host's memory, cpus and pids to environments'
   * caps. Caps are ceilings (each enforced by the kernel), not what an environment uses: summed at
   * 1 they would stop a 24 GiB host at a dozen default services, so memory is committed 4 times
   * over and cpus (a share of time) 32 times by default.
   */
  placementOvercommitMemory: Ratio.default(4),
  placementOvercommitCpus: Ratio.default(32),
  placementOvercommitPids: Ratio.default(1),
  /**
   * The throughput placement assumes a transfer of a version between hosts gets, in MB (10^6
   * bytes) per second: a fork on a host without the version pays its estimated time in the score.
   */
  placementTransferMbps: z.coerce.number().positive().max(1e6).default(200),
  /**
   * How a version goes from host to host: `relay` (through this control plane's host streams;
   * hosts need no inbound port), `direct` (the sender connects to the receiver's transfer
   * listener with a ticket from the cp; a receiver without one fails the transfer) or `auto`
   * (direct where the receiver offers a listener the cp accepts, else, and after a failed direct
   * attempt, the relay). docs/reference/protocol.md#direct-transfers.
   */
  transferPath: z.enum(["relay", "direct", "auto"]).default("relay"),
  /**
   * The key target credentials are sealed with (AES-256-GCM): 32 bytes, base64. Without it the
   * first start writes one to <data-dir>/credential-key (mode 0600) and later starts read it.
   */
  credentialKey: CredentialKey.optional(),
  /** Keys credentials may still be sealed with (a rotation): read with them, resealed with the current key at start. */
  credentialKeysPrevious: CommaList.pipe(z.array(CredentialKey)).default([]),
  /** How often provisioned targets are reconciled with their provider's machines. */
  provisionIntervalMs: NumberSetting(100).default(60_000),
  /**
   * How long a provisioned machine has to boot and join (its join token lives as long): one that
   * has not joined by then is deleted at the provider and marked failed.
   */
  provisionJoinTimeoutMs: NumberSetting(100)
    .max(24 * 3600 * 1000)
    .default(1_200_000),
  /** The GitHub App (push-to-deploy): its id, its private key (PEM file) and its webhook secret. */
  githubAppId: z.coerce.number().int().positive().optional(),
  githubPrivateKeyFile: z.string().min(1).optional(),
  githubWebhookSecret: z.string().min(1).optional(),
  /** GitHub's REST API (GitHub Enterprise Server: https://HOST/api/v3). */
  githubApiUrl: z.url().default("https://api.github.com"),
  /** Where repositories are cloned from: <url>/OWNER/REPO.git (GitHub Enterprise Server: https://HOST). */
  githubWebUrl: z.url().default("https://github.com"),
});
export type CpConfig = z.output<typeof CpConfig>;
export type CpConfigInput = z.input<typeof CpConfig>;

/** Each setting's flag and environment variable (the docs table is checked against this). */
export const SETTINGS: ReadonlyArray<{
  key: keyof CpConfigInput;
  flag: string;
  env: string;
  secret?: boolean;
}> = [
  { key: "listen", flag: "--listen", env: "DENV_CP_LISTEN" },
  { key: "dataDir", flag: "--data-dir", env: "DENV_CP_DATA_DIR" },
  { key: "databaseUrl", flag: "--database-url", env: "DENV_CP_DATABASE_URL", secret: true },
  { key: "publicUrl", flag: "--public-url", env: "DENV_CP_PUBLIC_URL" },
  { key: "corsOrigins", flag: "--cors-origins", env: "DENV_CP_CORS_ORIGINS" },
  { key: "webDir", flag: "--web-dir", env: "DENV_CP_WEB_DIR" },
  { key: "adminTokenFile", flag: "--admin-token-file", env: "DENV_CP_ADMIN_TOKEN_FILE" },
  { key: "sandboxSweepMs", flag: "--sandbox-sweep-ms", env: "DENV_CP_SANDBOX_SWEEP_MS" },
  { key: "retainVersions", flag: "--retain-versions", env: "DENV_CP_RETAIN_VERSIONS" },
  { key: "commandTimeoutMs", flag: "--command-timeout-ms", env: "DENV_CP_COMMAND_TIMEOUT_MS" },
  { key: "resumeTimeoutMs", flag: "--resume-timeout-ms", env: "DENV_CP_RESUME_TIMEOUT_MS" },
  { key: "maxSourceBytes", flag: "--max-source-bytes", env: "DENV_CP_MAX_SOURCE_BYTES" },
  { key: "logLevel", flag: "--log-level", env: "DENV_CP_LOG_LEVEL" },
  {
    key: "placementOvercommitMemory",
    flag: "--placement-overcommit-memory",
    env: "DENV_CP_PLACEMENT_OVERCOMMIT_MEMORY",
  },
  {
    key: "placementOvercommitCpus",
    flag: "--placement-overcommit-cpus",
    env: "DENV_CP_PLACEMENT_OVERCOMMIT_CPUS",
  },
  {
    key: "placementOvercommitPids",
    flag: "--placement-overcommit-pids",
    env: "DENV_CP_PLACEMENT_OVERCOMMIT_PIDS",
  },
  {
    key: "placementTransferMbps",
    flag: "--placement-transfer-mbps",
    env: "DENV_CP_PLACEMENT_TRANSFER_MBPS",
  },
  { key: "transferPath", flag: "--transfer-path", env: "DENV_CP_TRANSFER_PATH" },
  { key: "credentialKey", flag: "--credential-key", env: "DENV_CP_CREDENTIAL_KEY", secret: true },
  {
    key: "credentialKeysPrevious",
    flag: "--credential-keys-previous",
    env: "DENV_CP_CREDENTIAL_KEYS_PREVIOUS",
    secret: true,
  },
  { key: "provisionIntervalMs", flag: "--provision-interval-ms", env: "DENV_CP_PROVISION_INTERVAL_MS" },
  {
    key: "provisionJoinTimeoutMs",
    flag: "--provision-join-timeout-ms",
    env: "DENV_CP_PROVISION_JOIN_TIMEOUT_MS",
  },
  { key: "githubAppId", flag: "--github-app-id", env: "DENV_CP_GITHUB_APP_ID" },
  { key: "githubPrivateKeyFile", flag: "--github-private-key-file", env: "DENV_CP_GITHUB_PRIVATE_KEY_FILE" },
  {
    key: "githubWebhookSecret",
    flag: "--github-webhook-secret",
    env: "DENV_CP_GITHUB_WEBHOOK_SECRET",
    secret: true,
  },
  { key: "githubApiUrl", flag: "--github-api-url", env: "DENV_CP_GITHUB_API_URL" },
  { key: "githubWebUrl", flag: "--github-web-url", env: "DENV_CP_GITHUB_WEB_URL" },
];

/** Flags (`--x v` or `--x=v`) over environment variables over defaults. */
export function parseConfig(argv: readonly string[], env: NodeJS.ProcessEnv): CpConfig {
  const raw: Record<string, string> = {};
  for (const s of SETTINGS) {
    const v = env[s.env];
    if (v !== undefined && v !== "") raw[s.key] = v;
  }
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i] as string;
    const [flag, inline] = arg.split(/=(.*)/s, 2) as [string, string | undefined];
    const s = SETTINGS.find((x) => x.flag === flag);
    if (!s) throw new Error(`unknown flag ${flag}; denv-cp --help lists the flags`);
    const value = inline ?? argv[++i];
    if (value === undefined) throw new Error(`flag ${flag} needs a value`);
    raw[s.key] = value;
  }
  return CpConfig.parse(raw);
}

/** The database URL and the admin token file, with their defaults under the data directory. */
export function resolvePaths(c: CpConfig): { databaseUrl: string; adminTokenFile: string } {
  return {
    databaseUrl: c.databaseUrl ?? join(c.dataDir, "denv.db"),
    adminTokenFile: c.adminTokenFile ?? join(c.dataDir, "admin-token"),
  };
}

/** The configuration as it may be logged: a database password never is. */
export function redactConfig(c: CpConfig): Record<string, unknown> {
  const out: Record<string, unknown> = { ...c };
  for (const s of SETTINGS) {
    const v = out[s.key];
    if (s.secret && typeof v === "string")
      out[s.key] = s.key === "databaseUrl" ? v.replace(/\/\/([^:/@]+):[^@]*@/, "//$1:***@") : "***";
  }
  for (const key of ["credentialKey", "credentialKeysPrevious"] as const) {
    if (out[key] !== undefined) out[key] = "***";
  }
  return out;
}

export function usage(): string {
  const lines = SETTINGS.map((s) => `  ${s.flag.padEnd(22)} ${s.env}`);
  return `usage: denv-cp [flags]\n       denv-cp --help | --version\n\nflags (and their environment variables):\n${lines.join("\n")}\n`;
}
