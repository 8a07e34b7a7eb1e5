import {
  DenvApiError,
  DenvClient,
  DenvClientError,
  type LoadedClientConfig,
  loadClientConfig,
} from "@denv/sdk";
import { parseEnvRef } from "@denv/spec";
import { CliError, UsageError } from "./exit-codes.js";
import type { Io } from "./io.js";
import { LiveLine } from "./live-line.js";

/**
 * What a command's `run` gets: its parsed arguments, the configuration, a client, and the two
 * outputs (the result on stdout, once; progress on stderr).
 */
/** Parsed flag values of one command. */
export type Values = Record<string, string | boolean | string[] | boolean[] | undefined>;

/** What a context knows of the command it runs for. */
export interface CommandInfo {
  /** The words after `denv`: "deploy", "env fork". */
  name: string;
  /** The usage line a usage error shows. */
  usage: string;
  /** Exit code of denv's own failures (default 1). */
  failureCode?: number | undefined;
}

export class Context {
  readonly io: Io;
  readonly spec: CommandInfo;
  readonly positionals: string[];
  /** Arguments after the split (exec: the command to run). */
  readonly rest: string[];
  readonly #values: Values;
  #config: LoadedClientConfig | undefined;
  #printed = false;

  constructor(io: Io, spec: CommandInfo, values: Values, positionals: string[], rest: string[]) {
    this.io = io;
    this.spec = spec;
    this.#values = values;
    this.positionals = positionals;
    this.rest = rest;
  }

  get json(): boolean {
    return this.#values.json === true;
  }

  string(name: string): string | undefined {
    const v = this.#values[name];
    return typeof v === "string" ? v : undefined;
  }

  bool(name: string): boolean {
    return this.#values[name] === true;
  }

  strings(name: string): string[] {
    const v = this.#values[name];
    return Array.isArray(v) ? v.filter((x): x is string => typeof x === "string") : [];
  }

  /** A whole number flag, at least `min`. */
  int(name: string, min = 0): number | undefined {
    const text = this.string(name);
    if (text === undefined) return undefined;
    if (!/^\d+$/.test(text) || Number(text) < min)
      throw this.usage(`--${name} must be a whole number >= ${min}, not '${text}'`);
    return Number(text);
  }

  /** A positive number of seconds (fractions allowed). */
  seconds(name: string): number | undefined {
    const text = this.string(name);
    if (text === undefined) return undefined;
    const n = Number(text);
    if (!Number.isFinite(n) || n <= 0)
      throw this.usage(`--${name} must be a positive number of seconds, not '${text}'`);
    return n;
  }

  usage(message: string): UsageError {
    return new UsageError(message, this.spec.usage);
  }

  /** The positional arguments, checked against how many the command takes. */
  args(min: number, max: number, names: string): string[] {
    if (this.positionals.length < min) throw this.usage(`missing ${names}`);
    if (this.positionals.length > max) {
      throw this.usage(`unexpected argument '${this.positionals[max]}'`);
    }
    return this.positionals;
  }

  /** The configuration: file < DENV_* < --url/--token/--project. */
  config(): LoadedClientConfig {
    this.#config ??= loadClientConfig({
      env: this.io.env,
      overrides: { url: this.string("url"), token: this.string("token"), project: this.string("project") },
    });
    return this.#config;
  }

  client(): DenvClient {
    const { url, token } = this.config();
    if (url === undefined) {
      throw new CliError(
        "invalid_config",
        "no control plane URL: run 'denv login --url URL --token TOKEN', set DENV_URL or pass --url (or start one on this machine with 'denv up')",
      );
    }
    return new DenvClient({ url, token });
  }

  /** The project: the argument when given, else --project / DENV_PROJECT / the config file. */
  project(given?: string): string {
    const project = given ?? this.config().project;
    if (project === undefined) {
      throw this.usage(
        "no project given: pass PROJECT, or set one with --project, DENV_PROJECT or 'denv config set project NAME'",
      );
    }
    return project;
  }

  /** PROJECT/ENV (ENV defaults to alpha) as the id the SDK takes. */
  environment(ref: string): string {
    try {
      const { project, environment } = parseEnvRef(ref);
      return `${project}/${environment}`;
    } catch (err) {
      throw this.usage((err as Error).message);
    }
  }

  /** Prints the command's result: `value` as one JSON object with --json, else `text`. */
  print(value: unknown, text: string | (() => string)): void {
    if (this.#printed && this.json) throw new Error("a command printed two JSON objects");
    this.#printed = true;
    if (this.json) this.io.stdout(`${JSON.stringify(value)}\n`);
    else {
      const out = typeof text === "string" ? text : text();
      if (out !== "") this.io.stdout(out.endsWith("\n") ? out : `${out}\n`);
    }
  }

  /** Progress and notes for people: stderr, in both modes. */
  progress(text: string): void {
    this.#live?.clear();
    this.io.stderr(text.endsWith("\n") ? text : `${text}\n`);
  }

  #live: LiveLine | undefined;

  /** The line a long operation rewrites in place: on a terminal's stderr, never with --json. */
  live(): LiveLine {
    this.#live ??= new LiveLine(
      (text) => this.io.stderr(text),
      this.io.stderrIsTty && !this.json,
      this.io.stderrColumns,
    );
    return this.#live;
  }
}

/** The code and message of a failure, with what to do about the common ones. */
export function describeError(
  err: unknown,
): { code: string; message: string; details?: readonly string[] } | undefined {
  if (err instanceof DenvApiError) {
    let message = err.message;
    if (err.code === "unreachable") {
      message += "; is it running? 'denv up' starts one on this machine, --url or DENV_URL points elsewhere";
    } else if (err.status === 401) {
      message += "; check the token ('denv login --url URL --token TOKEN', DENV_TOKEN or --token)";
    }
    return err.details.length > 0
      ? { code: err.code, message, details: err.details }
      : { code: err.code, message };
  }
  if (err instanceof DenvClientError || err instanceof CliError)
    return { code: err.code, message: err.message };
  return undefined;
}
