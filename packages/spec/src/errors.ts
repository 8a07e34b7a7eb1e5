/**
 * The one error type of denv. `code` is stable (clients branch on it), `status` is the HTTP
 * status the control plane answers with, `message` is for people: what was wrong and what to do.
 */
export const ErrorCodes = {
  invalid_compose: 400,
  invalid_request: 400,
  not_found: 404,
  conflict: 409,
  agent_root: 403,
  special_file: 422,
  egress_leak: 412,
  verifier_failed: 422,
  agent_survived: 500,
  timeout: 504,
  docker: 502,
  unauthorized: 401,
  forbidden: 403,
  internal: 500,
} as const;

export type ErrorCode = keyof typeof ErrorCodes;

export class DenvError extends Error {
  readonly code: ErrorCode;
  readonly status: number;
  readonly details: readonly string[];

  constructor(code: ErrorCode, message: string, details: readonly string[] = []) {
    super(message);
    this.name = "DenvError";
    this.code = code;
    this.status = ErrorCodes[code];
    this.details = details;
  }

  toJSON(): { code: ErrorCode; message: string; details: readonly string[] } {
    return { code: this.code, message: this.message, details: this.details };
  }
}

export function isDenvError(err: unknown): err is DenvError {
  return err instanceof DenvError;
}
