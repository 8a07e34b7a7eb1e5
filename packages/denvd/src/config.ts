import { BlockList, isIP } from "node:net";
import { DenvdMessages } from "@denv/spec/messages";
import { z } from "zod";

/**
 * denvd's configuration: one schema for flags and environment variables, parsed once by
 * main.ts. A flag wins over its variable, a variable over the default. Nothing else in denvd
 * reads process.env: modules take what they need from the parsed object.
 */

/** `k=v,k=v` (DENVD_LABELS) or repeated `--label k=v`. */
function parseLabels(items: readonly string[], source: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const item of items) {
    const eq = item.indexOf("=");
    const key = eq > 0 ? item.slice(0, eq).trim() : "";
    if (!/^[a-zA-Z0-9][a-zA-Z0-9._/-]*$/.test(key)) {
      throw new ConfigError(`${source}: label '${item}' is not key=value (keys: letters, digits, . _ / -)`);
    }
    out[key] = item.slice(eq + 1).trim();
  }
  return out;
}

const StoreMethodSetting = z.enum(["auto", "btrfs", "copy"]);

export const DenvdConfig = z.object({
  /** Records, the journal, the volume store and host.json (DENVD_STATE_DIR). */
  stateDir: z.string().min(1).default("/var/lib/denvd"),
  /** DENVD_DOCKER_SOCKET */
  dockerSocket: z.string().min(1).default("/var/run/docker.sock"),
  /** DENVD_STORE: btrfs loop file, plain copies, or btrfs when it works (auto). */
  store: StoreMethodSetting.default("auto"),
  /** Placement labels this host announces (DENVD_LABELS, --label). */
  labels: z.record(z.string(), z.string()).default({}),
  /** The control plane (DENVD_URL): where `join` goes; for `run`, overrides host.json's url. */
  url: z.url({ protocol: /^https?$/, error: "must be an http:// or https:// URL" }).optional(),
  /** The join token (DENVD_TOKEN, --token). A secret: never logged. */
  joinToken: z.string().min(1).optional(),
  /** The name this host asks for when joining (DENVD_NAME, --name). */
  name: z.string().min(1).optional(),
  /** Print one JSON object on stdout instead of text. */
  json: z.boolean().default(false),
  /** join: replace an existing host.json. */
  force: z.boolean().default(false),
  /** Accept a plain http:// control plane off this machine (DENVD_INSECURE, --insecure). */
  insecure: z.boolean().default(false),
  /**
   * The most memory this host offers denv, in bytes (DENVD_CAPACITY_MEMORY, --capacity-memory):
   * hello reports the smaller of this and the machine's, for a machine that also runs other work.
   */
  capacityMemory: z.coerce
    .number({ error: "must be a number of bytes" })
    .int("must be a whole number of bytes")
    .positive("must be a positive number of bytes")
    .optional(),
  /**
   * Where this host takes direct version transfers from other hosts (DENVD_TRANSFER_LISTEN,
   * --transfer-listen): IP:PORT ([v6]:PORT); 0.0.0.0 or [::] listens everywhere and lets the control plane
   * use the address this host's connection comes from. Unset: no listener, every transfer to this
   * host goes through the control plane's relay.
   */
  transferListen: z
    .string()
    .refine(
      (v) => parseListen(v) !== undefined,
      "must be IP:PORT (an IPv6 address in brackets), port 1-65535",
    )
    .optional(),
  /**
   * A hosted sandbox provider this host bridges to (DENVD_PROVIDER, --provider): its environments
   * are the provider's sandboxes, through the provider's runtime. Unset: denv's own runtime on this
   * machine's Docker engine.
   */
  provider: z.enum(["e2b", "daytona", "prime", "modal"]).optional(),
  /** The provider's API (DENVD_PROVIDER_API_URL, --provider-api-url); default: its SDK's. */
  providerApiUrl: z.url({ protocol: /^https?$/, error: "must be an http:// or https:// URL" }).optional(),
  /** Where the provider's SDK reaches each sandbox (DENVD_PROVIDER_SANDBOX_URL); default: its SDK's. */
  providerSandboxUrl: z.url({ protocol: /^https?$/, error: "must be an http:// or https:// URL" }).optional(),
  /**
   * The user's API key at the provider (DENVD_PROVIDER_API_KEY only, never a flag). A secret: never
   * logged. Modal's is its token as TOKEN_ID:TOKEN_SECRET (modalToken).
   */
  providerApiKey: z.string().min(1).optional(),
  /**
   * Listeners denv runs that the egress probe connects to from inside each sandbox
   * (DENVD_PROVIDER_CANARIES, --provider-canary): HOST:PORT, comma-separated. A sandbox that
   * reaches one is not isolated.
   */
  providerCanaries: z
    .array(z.string().refine((v) => parseListen(v) !== undefined, "must be IP:PORT"))
    .default([]),
});
export type DenvdConfig = z.infer<typeof DenvdConfig>;

/** Flags as node:util parseArgs returns them (kebab-case names). */
export interface Flags {
  "state-dir"?: string;
  "docker-socket"?: string;
  store?: string;
  label?: string[];
  url?: string;
  token?: string;
  name?: string;
  json?: boolean;
  force?: boolean;
  insecure?: boolean;
  "capacity-memory"?: string;
  "transfer-listen"?: string;
  provider?: string;
  "provider-api-url"?: string;
  "provider-canary"?: string[];
}

export class ConfigError extends Error {
  override name = "ConfigError";
}

/** Which flag or variable a config field comes from, for error messages. */
const SOURCES: Record<string, string> = {
  stateDir: "--state-dir / DENVD_STATE_DIR",
  dockerSocket: "--docker-socket / DENVD_DOCKER_SOCKET",
  store: "--store / DENVD_STORE",
  labels: "--label / DENVD_LABELS",
  url: "--url / DENVD_URL",
  joinToken: "--token / DENVD_TOKEN",
  name: "--name / DENVD_NAME",
  insecure: "--insecure / DENVD_INSECURE",
  capacityMemory: "--capacity-memory / DENVD_CAPACITY_MEMORY",
  transferListen: "--transfer-listen / DENVD_TRANSFER_LISTEN",
  provider: "--provider / DENVD_PROVIDER",
  providerApiUrl: "--provider-api-url / DENVD_PROVIDER_API_URL",
  providerSandboxUrl: "DENVD_PROVIDER_SANDBOX_URL",
  providerApiKey: "DENVD_PROVIDER_API_KEY",
  providerCanaries: "--provider-canary / DENVD_PROVIDER_CANARIES",
};

/** DENVD_INSECURE: 1/true/yes or 0/false/no (anything else is refused, not guessed). */
function parseBool(value: string | undefined): boolean | string | undefined {
  if (value === undefined || value === "") return undefined;
  if (/^(1|true|yes)$/i.test(value)) return true;
  if (/^(0|false|no)$/i.test(value)) return false;
  return value;
}

export function loadConfig(flags: Flags, env: Readonly<Record<string, string | undefined>>): DenvdConfig {
  const nonEmpty = (v: string | undefined) => (v === undefined || v === "" ? undefined : v);
  const envLabels = nonEmpty(env.DENVD_LABELS)
    ? parseLabels((env.DENVD_LABELS as string).split(",").filter(Boolean), "DENVD_LABELS")
    : {};
  const raw = {
    stateDir: flags["state-dir"] ?? nonEmpty(env.DENVD_STATE_DIR),
    dockerSocket: flags["docker-socket"] ?? nonEmpty(env.DENVD_DOCKER_SOCKET),
    store: flags.store ?? nonEmpty(env.DENVD_STORE),
    labels: { ...envLabels, ...parseLabels(flags.label ?? [], "--label") },
    url: (flags.url ?? nonEmpty(env.DENVD_URL))?.replace(/\/+$/, ""),
    joinToken: flags.token ?? nonEmpty(env.DENVD_TOKEN),
    name: flags.name ?? nonEmpty(env.DENVD_NAME),
    json: flags.json ?? false,
    force: flags.force ?? false,
    insecure: flags.insecure ?? parseBool(env.DENVD_INSECURE),
    capacityMemory: flags["capacity-memory"] ?? nonEmpty(env.DENVD_CAPACITY_MEMORY),
    transferListen: flags["transfer-listen"] ?? nonEmpty(env.DENVD_TRANSFER_LISTEN),
    provider: flags.provider ?? nonEmpty(env.DENVD_PROVIDER),
    providerApiUrl: (flags["provider-api-url"] ?? nonEmpty(env.DENVD_PROVIDER_API_URL))?.replace(/\/+$/, ""),
    providerSandboxUrl: nonEmpty(env.DENVD_PROVIDER_SANDBOX_URL)?.replace(/\/+$/, ""),
    providerApiKey: nonEmpty(env.DENVD_PROVIDER_API_KEY),
    providerCanaries:
      flags["provider-canary"] ?? nonEmpty(env.DENVD_PROVIDER_CANARIES)?.split(",").filter(Boolean) ?? [],
  };
  const parsed = DenvdConfig.safeParse(raw);
  if (!parsed.success) {
    const lines = parsed.error.issues.map((i) => {
      const key = String(i.path[0] ?? "");
      return `${SOURCES[key] ?? key}: ${i.message}`;
    });
    throw new ConfigError(`invalid configuration: ${lines.join("; ")}`);
  }
  return parsed.data;
}

/** The configuration as it may be logged: secrets replaced. */
export function redact(config: DenvdConfig): Record<string, unknown> {
  return {
    ...config,
    joinToken: config.joinToken ? "[redacted]" : undefined,
    providerApiKey: config.providerApiKey ? "[redacted]" : undefined,
  };
}

/**
 * Why a bridge cannot start with the key it has (none, or for modal not TOKEN_ID:TOKEN_SECRET);
 * undefined when it can, or when the host bridges to no provider.
 */
export function providerKeyRefusal(config: DenvdConfig): string | undefined {
  if (config.provider === undefined) return undefined;
  if (!config.providerApiKey) return DenvdMessages.providerKeyMissing(config.provider);
  if (config.provider === "modal" && !modalToken(config.providerApiKey))
    return DenvdMessages.modalKeyMalformed();
  return undefined;
}

/**
 * Modal's token from a bridge's key: its id and secret joined by one colon (Modal has two
 * credentials where the other providers have one key); undefined when the key is not of that form.
 */
export function modalToken(key: string): { tokenId: string; tokenSecret: string } | undefined {
  const m = /^([^:]+):([^:]+)$/.exec(key);
  return m ? { tokenId: m[1] as string, tokenSecret: m[2] as string } : undefined;
}

/** IP:PORT or [IPv6]:PORT, the port 1-65535; undefined when it is neither. */
export function parseListen(v: string): { host: string; port: number } | undefined {
  const m = /^(?:\[([0-9a-fA-F:.]+)\]|([0-9.]+)):(\d{1,5})$/.exec(v);
  const host = m?.[1] ?? m?.[2];
  const port = Number(m?.[3]);
  if (!host || isIP(host) !== (m?.[1] ? 6 : 4) || !(port >= 1 && port <= 65535)) return undefined;
  return { host, port };
}

const LOOPBACK = new BlockList();
LOOPBACK.addSubnet("127.0.0.0", 8, "ipv4");
LOOPBACK.addAddress("::1", "ipv6");

/** This machine: 127.0.0.0/8, ::1 (in any spelling) and the name localhost. */
export function isLoopback(hostname: string): boolean {
  const host = hostname.replace(/^\[|\]$/g, "").toLowerCase();
  if (host === "localhost") return true;
  const family = isIP(host);
  return family !== 0 && LOOPBACK.check(host, family === 4 ? "ipv4" : "ipv6");
}

/**
 * Why denvd will not talk to `url`: plain http:// to another machine would carry the join token
 * and the host credential in clear text. undefined when it may (https, loopback, or `insecure`).
 */
export function insecureUrlRefusal(url: string, insecure: boolean): string | undefined {
  const parsed = new URL(url);
  if (parsed.protocol !== "http:" || insecure || isLoopback(parsed.hostname)) return undefined;
  return DenvdMessages.insecureUrl(url);
}
