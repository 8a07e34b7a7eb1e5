import { type TargetKindName, TargetMessages } from "./targets.js";

/**
 * The settings and credentials of each target kind (`denv targets add KIND NAME key=value…`, the
 * API's `settings` and `credentials`): what each key takes, its default, and their checks.
 */

/** A Hetzner Cloud or AWS label/tag value as denv writes it: Hetzner's label rules. */
const LABEL_KEY = /^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$/;
const LABEL_VALUE = /^([a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?)?$/i;

export interface SettingSpec {
  /** One line: what the value must be. */
  rule: string;
  /** The value, or undefined when it does not follow the rule. */
  parse(raw: unknown): unknown;
  default?: unknown;
  required?: boolean;
}

const text = (re: RegExp, rule: string, fallback?: string, required = false): SettingSpec => ({
  rule,
  default: fallback,
  required,
  parse: (v) => (typeof v === "string" && re.test(v) ? v : undefined),
});
const int = (min: number, fallback: number): SettingSpec => ({
  rule: `a whole number >= ${min}`,
  default: fallback,
  parse: (v) => {
    const n = typeof v === "number" ? v : typeof v === "string" && /^\d+$/.test(v) ? Number(v) : Number.NaN;
    return Number.isInteger(n) && n >= min ? n : undefined;
  },
});
const url = (fallback?: string): SettingSpec => ({
  rule: "an http:// or https:// URL",
  default: fallback,
  parse: (v) => {
    if (typeof v !== "string" || !/^https?:\/\/[^\s]+$/.test(v)) return undefined;
    try {
      return new URL(v).toString().replace(/\/$/, "");
    } catch {
      return undefined;
    }
  },
});
/** A list setting: comma-separated (the CLI) or an array (the API), each item checked; at most `max`. */
const list = (rule: string, ok: (s: string) => boolean, max = Number.POSITIVE_INFINITY): SettingSpec => ({
  rule,
  default: [],
  parse: (v) => {
    const items =
      typeof v === "string" ? v.split(",").filter((s) => s !== "") : Array.isArray(v) ? v : undefined;
    return items && items.length <= max && items.every((s) => typeof s === "string" && ok(s))
      ? items
      : undefined;
  },
});

/** Listeners: IP:PORT, IPv6 in brackets. */
const listens = list("IP:PORT addresses separated by commas (IPv6 in brackets)", (s) => {
  const port = Number(s.slice(s.lastIndexOf(":") + 1));
  return /^(?:\[[0-9a-fA-F:.]+\]|\d{1,3}(?:\.\d{1,3}){3}):\d{1,5}$/.test(s) && port >= 1 && port <= 65535;
});

/** IPv4 CIDRs, at most 5 (Daytona's networkAllowList). */
const cidrs = list(
  "up to 5 IPv4 CIDRs separated by commas (such as 203.0.113.7/32)",
  (s) =>
    /^\d{1,3}(\.\d{1,3}){3}\/\d{1,2}$/.test(s) &&
    s.split(/[./]/).every((n, i) => Number(n) <= (i === 4 ? 32 : 255)),
  5,
);

/** `k=v,k2=v2` (the CLI) or an object (the API). */
const labels: SettingSpec = {
  rule: "k=v pairs separated by commas, keys and values of letters, digits, '.', '-' and '_'",
  default: {},
  parse: (v) => {
    const pairs: [string, unknown][] =
      typeof v === "string"
        ? v
            .split(",")
            .filter((s) => s !== "")
            .map((s) => {
              const i = s.indexOf("=");
              return i < 0 ? [s, undefined] : [s.slice(0, i), s.slice(i + 1)];
            })
        : v && typeof v === "object" && !Array.isArray(v)
          ? Object.entries(v)
          : [["", undefined]];
    const out: Record<string, string> = {};
    for (const [k, val] of pairs) {
      if (!LABEL_KEY.test(k) || typeof val !== "string" || !LABEL_VALUE.test(val)) return undefined;
      out[k] = val;
    }
    return out;
  },
};

const NAME_RULE = "letters, digits, '.', '-' and '_'";
const WORD = /^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$/;

const MACHINES: Record<string, SettingSpec> = {
  min_machines: int(0, 0),
  max_machines: int(1, 1),
  idle_shutdown_minutes: int(0, 30),
  labels,
};

export interface KindSettings {
  settings: Record<string, SettingSpec>;
  /** Secret settings: stored encrypted, never returned; the CLI reads each from `env`. */
  credentials: ReadonlyArray<{ name: string; env: string }>;
}

export const TARGET_SETTINGS: Record<TargetKindName, KindSettings> = {
  hosts: { settings: {}, credentials: [] },
  hetzner: {
    settings: {
      location: text(WORD, NAME_RULE, "fsn1"),
      server_type: text(WORD, NAME_RULE, "cx22"),
      image: text(WORD, NAME_RULE, "debian-13"),
      ...MACHINES,
      base_url: url("https://api.hetzner.cloud/v1"),
    },
    credentials: [{ name: "api_token", env: "HCLOUD_TOKEN" }],
  },
  aws: {
    settings: {
      region: text(/^[a-z]{2}(-[a-z]+)+-\d$/, "an AWS region such as eu-central-1", undefined, true),
      instance_type: text(WORD, NAME_RULE, "t3.medium"),
      image: text(/^ami-[0-9a-f]{8,17}$/, "an AMI id (ami-...)", undefined, true),
      subnet_id: text(/^subnet-[0-9a-f]{8,17}$/, "a subnet id (subnet-...)"),
      ...MACHINES,
      endpoint: url(),
    },
    credentials: [
      { name: "access_key_id", env: "AWS_ACCESS_KEY_ID" },
      { name: "secret_access_key", env: "AWS_SECRET_ACCESS_KEY" },
    ],
  },
  "daytona-docker": {
    // snapshot: a Daytona snapshot whose image ships Docker Engine and Node.js 20 or later (the
    // install script adds what is missing with apt-get). allow_list: the sandboxes' outbound
    // allowlist (Daytona's networkAllowList: up to 5 IPv4 CIDRs); it must hold the control
    // plane's address, which denvd dials.
    settings: {
      snapshot: text(WORD, NAME_RULE, undefined, true),
      cpu: int(1, 2),
      memory: int(1, 4),
      disk: int(3, 20),
      allow_list: cidrs,
      ...MACHINES,
      base_url: url("https://app.daytona.io/api"),
    },
    credentials: [{ name: "api_key", env: "DAYTONA_API_KEY" }],
  },
  e2b: {
    // sandbox_url: where the SDK reaches each sandbox's envd (default: E2B's, per sandbox).
    // canaries: listeners of yours no sandbox may reach (the egress probe connects to each, and
    // to the control plane's own address).
    settings: { base_url: url("https://api.e2b.dev"), sandbox_url: url(), canaries: listens },
    credentials: [{ name: "api_key", env: "E2B_API_KEY" }],
  },
  daytona: {
    // canaries: as e2b's.
    settings: { base_url: url("https://app.daytona.io/api"), canaries: listens },
    credentials: [{ name: "api_key", env: "DAYTONA_API_KEY" }],
  },
  modal: {
    // base_url: Modal's server, as its SDK's MODAL_SERVER_URL. canaries: as e2b's.
    settings: { base_url: url("https://api.modal.com"), canaries: listens },
    credentials: [
      { name: "token_id", env: "MODAL_TOKEN_ID" },
      { name: "token_secret", env: "MODAL_TOKEN_SECRET" },
    ],
  },
  prime: {
    // base_url: Prime's, as its SDK's PRIME_API_BASE_URL (the API is under its /api/v1).
    // canaries: as e2b's.
    settings: { base_url: url("https://api.primeintellect.ai"), canaries: listens },
    credentials: [{ name: "api_key", env: "PRIME_API_KEY" }],
  },
};

export type TargetSettings = Record<string, unknown>;

/**
 * Validates a kind's settings (strings from the CLI or JSON values from the API) and fills the
 * defaults; throws an Error with one line naming the first setting that is wrong.
 */
export function parseTargetSettings(kind: TargetKindName, given: Record<string, unknown>): TargetSettings {
  const spec = TARGET_SETTINGS[kind].settings;
  const known = Object.keys(spec);
  const out: TargetSettings = {};
  for (const [key, raw] of Object.entries(given)) {
    const s = spec[key];
    if (!s) throw new Error(TargetMessages.unknownSetting(kind, key, known));
    const v = s.parse(raw);
    if (v === undefined) {
      throw new Error(
        TargetMessages.badSetting(kind, key, typeof raw === "string" ? raw : JSON.stringify(raw), s.rule),
      );
    }
    out[key] = v;
  }
  for (const [key, s] of Object.entries(spec)) {
    if (key in out) continue;
    if (s.required) throw new Error(TargetMessages.missingSetting(kind, key, s.rule));
    if (s.default !== undefined) out[key] = s.default;
  }
  if (typeof out.min_machines === "number" && typeof out.max_machines === "number") {
    if (out.min_machines > out.max_machines) {
      throw new Error(TargetMessages.minAboveMax(out.min_machines, out.max_machines));
    }
  }
  return out;
}

/** Checks a kind's credentials: every one present and non-empty, none unknown. */
export function parseTargetCredentials(
  kind: TargetKindName,
  given: Record<string, unknown>,
): Record<string, string> {
  const creds = TARGET_SETTINGS[kind].credentials;
  const out: Record<string, string> = {};
  for (const key of Object.keys(given)) {
    if (!creds.some((c) => c.name === key)) {
      throw new Error(
        TargetMessages.unknownCredential(
          kind,
          key,
          creds.map((c) => c.name),
        ),
      );
    }
  }
  for (const c of creds) {
    const v = given[c.name];
    if (typeof v !== "string" || v === "")
      throw new Error(TargetMessages.missingCredential(kind, c.name, c.env));
    out[c.name] = v;
  }
  return out;
}
