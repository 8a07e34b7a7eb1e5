import { ErrorResponse } from "@denv/spec";

/**
 * An error answered by the control plane (`{"error": {code, message, details?}}` with an HTTP
 * status), or a failure to reach it or to read its answer. `code` is stable: callers branch on
 * it (the codes of packages/spec/src/errors.ts, plus `unreachable` and `invalid_response`).
 */
export class DenvApiError extends Error {
  readonly status: number;
  readonly code: string;
  readonly details: readonly string[];

  constructor(status: number, code: string, message: string, details: readonly string[] = []) {
    super(message);
    this.name = "DenvApiError";
    this.status = status;
    this.code = code;
    this.details = details;
  }

  toJSON(): { code: string; message: string; details?: readonly string[] } {
    return this.details.length > 0
      ? { code: this.code, message: this.message, details: this.details }
      : { code: this.code, message: this.message };
  }
}

/**
 * A failure on this side that no server answered: an unreadable config file, a local port in
 * use, a tar entry refused on extraction. Same `code` + `message` shape as DenvApiError.
 */
export class DenvClientError extends Error {
  readonly code: string;

  constructor(code: string, message: string) {
    super(message);
    this.name = "DenvClientError";
    this.code = code;
  }
}

/** The control plane could not be reached at all (connection refused, DNS, TLS, reset). */
export class DenvUnreachableError extends DenvApiError {
  readonly url: string;

  constructor(url: string, cause: unknown) {
    super(0, "unreachable", `cannot reach the control plane at ${url}: ${describeCause(cause)}`);
    this.name = "DenvUnreachableError";
    this.url = url;
    this.cause = cause;
  }
}

/**
 * Node's fetch reports every network failure as `TypeError: fetch failed` and hides the reason
 * (ECONNREFUSED, ENOTFOUND, ...) in `cause`; the reason is what tells the user what to fix.
 */
function describeCause(cause: unknown): string {
  let err = cause;
  for (let depth = 0; depth < 4 && err instanceof Error; depth++) {
    const code = (err as NodeJS.ErrnoException).code;
    if (typeof code === "string" && code !== "") {
      return err.message.includes(code) ? err.message : `${code} ${err.message}`;
    }
    if (!(err.cause instanceof Error)) return err.message;
    err = err.cause;
  }
  return String(cause);
}

/** The DenvApiError of a non-2xx answer: its error body when it has one, else its status line. */
export function errorFromBody(status: number, statusText: string, body: string, what: string): DenvApiError {
  let json: unknown;
  try {
    json = JSON.parse(body);
  } catch {
    json = undefined;
  }
  const parsed = ErrorResponse.safeParse(json);
  if (parsed.success) {
    const { code, message, details } = parsed.data.error;
    return new DenvApiError(status, code, message, details ?? []);
  }
  // Not denv's error body: a proxy or another server answered.
  const text = body.trim().slice(0, 200);
  return new DenvApiError(
    status,
    "http_error",
    `${what} answered ${status} ${statusText}${text === "" ? "" : `: ${text}`}`.trim(),
  );
}
