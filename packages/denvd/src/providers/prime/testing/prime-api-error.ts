/**
 * A refusal of the Prime double: the control API sends FastAPI's `{"detail": message}` (the
 * SDK reads `detail` into its APIError), the gateway `{"error": code, "message"}` (the SDK
 * tells a gone sandbox by `error`: 410 `sandbox_terminated`, 502 `sandbox_not_found`).
 */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
    /** The gateway's machine-readable code. */
    readonly code?: string,
  ) {
    super(message);
  }
}
