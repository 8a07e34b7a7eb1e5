import { randomBytes } from "node:crypto";
import { mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { DenvClientError } from "./errors.js";

/**
 * The client configuration that the CLI and the Python package share (ARCHITECTURE "Client
 * configuration"): `~/.config/denv/config.json` holding `url`, `token` and `project`.
 */
export interface ClientConfig {
  url?: string | undefined;
  token?: string | undefined;
  project?: string | undefined;
}

export const CONFIG_KEYS = ["url", "token", "project"] as const;
export type ConfigKey = (typeof CONFIG_KEYS)[number];

/** Where each value came from, so that `denv config` can say why a value is what it is. */
export type ConfigSource = "flag" | "env" | "file";

export interface LoadedClientConfig extends ClientConfig {
  /** The config file read (it may not exist). */
  path: string;
  sources: Partial<Record<ConfigKey, ConfigSource>>;
}

export interface LoadClientConfigOptions {
  /** Values given explicitly (flags); they win over everything. */
  overrides?: ClientConfig;
  /** The environment to read DENV_* and XDG_CONFIG_HOME from (default process.env). */
  env?: NodeJS.ProcessEnv;
  /** The home directory (default os.homedir()). */
  home?: string;
}

const ENV_NAMES: Record<ConfigKey, string> = {
  url: "DENV_URL",
  token: "DENV_TOKEN",
  project: "DENV_PROJECT",
};

/** The config file: DENV_CONFIG, else $XDG_CONFIG_HOME/denv/config.json, else ~/.config/denv/config.json. */
export function clientConfigPath(env: NodeJS.ProcessEnv = process.env, home: string = os.homedir()): string {
  if (env.DENV_CONFIG !== undefined && env.DENV_CONFIG !== "") return path.resolve(env.DENV_CONFIG);
  const base =
    env.XDG_CONFIG_HOME !== undefined && path.isAbsolute(env.XDG_CONFIG_HOME)
      ? env.XDG_CONFIG_HOME
      : path.join(home, ".config");
  return path.join(base, "denv", "config.json");
}

/**
 * Reads the configuration: the file, overridden by DENV_URL, DENV_TOKEN and DENV_PROJECT, then
 * by `overrides`. A missing file is an empty configuration; an unreadable one is an error that
 * names the file, never silently ignored.
 */
export function loadClientConfig(options: LoadClientConfigOptions = {}): LoadedClientConfig {
  const env = options.env ?? process.env;
  const file = clientConfigPath(env, options.home);
  const stored = readConfigFile(file);
  const loaded: LoadedClientConfig = { path: file, sources: {} };
  for (const key of CONFIG_KEYS) {
    const candidates: [string | undefined, ConfigSource][] = [
      [options.overrides?.[key], "flag"],
      [env[ENV_NAMES[key]], "env"],
      [stored[key], "file"],
    ];
    const found = candidates.find(([value]) => value !== undefined && value !== "");
    if (found !== undefined) {
      loaded[key] = found[0];
      loaded.sources[key] = found[1];
    }
  }
  return loaded;
}

/** The file's own content (keys other than url/token/project are kept as they are). */
export function readConfigFile(file: string): ClientConfig & Record<string, unknown> {
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return {};
    throw new DenvClientError(
      "invalid_config",
      `cannot read the denv config ${file}: ${(err as Error).message}`,
    );
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    throw new DenvClientError("invalid_config", `the denv config ${file} is not JSON; fix or remove it`);
  }
  if (typeof json !== "object" || json === null || Array.isArray(json)) {
    throw new DenvClientError(
      "invalid_config",
      `the denv config ${file} is not a JSON object; fix or remove it`,
    );
  }
  for (const key of CONFIG_KEYS) {
    const value = (json as Record<string, unknown>)[key];
    if (value !== undefined && typeof value !== "string") {
      throw new DenvClientError("invalid_config", `'${key}' in the denv config ${file} is not a string`);
    }
  }
  return json as ClientConfig & Record<string, unknown>;
}

/**
 * Writes the configuration file: merged into what the file holds (undefined removes a key),
 * mode 0600 because it holds a token, written to a temporary file and renamed so that a
 * reader never sees half a file.
 */
export function saveClientConfig(
  values: ClientConfig,
  options: { path?: string; env?: NodeJS.ProcessEnv; home?: string } = {},
): string {
  const file = options.path ?? clientConfigPath(options.env ?? process.env, options.home);
  const merged: Record<string, unknown> = { ...readConfigFile(file) };
  for (const key of CONFIG_KEYS) {
    if (!(key in values)) continue;
    if (values[key] === undefined) delete merged[key];
    else merged[key] = values[key];
  }
  mkdirSync(path.dirname(file), { recursive: true, mode: 0o700 });
  const tmp = `${file}.${randomBytes(6).toString("hex")}.tmp`;
  try {
    writeFileSync(tmp, `${JSON.stringify(merged, null, 2)}\n`, { mode: 0o600, flag: "wx" });
    renameSync(tmp, file);
  } catch (err) {
    rmSync(tmp, { force: true });
    throw new DenvClientError(
      "invalid_config",
      `cannot write the denv config ${file}: ${(err as Error).message}`,
    );
  }
  return file;
}
