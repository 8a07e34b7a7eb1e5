import { ExecRequest, parseEnvRef, parseVersionRef } from "@denv/spec";
import { DenvClientError } from "./errors.js";

/** How the client turns ids into route paths, and refuses bad ones before any request is sent. */

type Input<S> = S extends { _zod: { input: infer I } } ? I : never;

export const enc = encodeURIComponent;

export function withSignal<T extends object>(
  init: T,
  signal: AbortSignal | undefined,
): T & { signal?: AbortSignal } {
  return signal === undefined ? init : { ...init, signal };
}

/** `PROJECT/ENV` (ENV defaults to alpha) split in two; a bad id is refused before any request. */
export function splitEnv(env: string): { project: string; name: string } {
  try {
    const { project, environment } = parseEnvRef(env);
    return { project, name: environment };
  } catch (err) {
    throw new DenvClientError("invalid_request", (err as Error).message);
  }
}

export function envPath(env: string): string {
  const { project, name } = splitEnv(env);
  return `/v1/environments/${enc(project)}/${enc(name)}`;
}

export function versionPath(id: string): string {
  try {
    const { project, number } = parseVersionRef(id);
    return `/v1/versions/${enc(project)}/${number}`;
  } catch (err) {
    throw new DenvClientError("invalid_request", (err as Error).message);
  }
}

export function parseServicePort(target: string): { service: string; port: number } {
  const match = /^([^:]+):(\d{1,5})$/.exec(target);
  const port = Number(match?.[2]);
  if (match === null || port < 1 || port > 65535) {
    throw new DenvClientError("invalid_request", `'${target}' is not SERVICE:PORT (e.g. db:5432)`);
  }
  return { service: match[1] ?? "", port };
}

export function checkExec(request: Input<typeof ExecRequest>): ExecRequest {
  const parsed = ExecRequest.safeParse(request);
  if (parsed.success) return parsed.data;
  const issue = parsed.error.issues[0];
  const where = issue === undefined || issue.path.length === 0 ? "" : `${issue.path.join(".")}: `;
  throw new DenvClientError(
    "invalid_request",
    `invalid exec request: ${where}${issue?.message ?? "invalid"}`,
  );
}
