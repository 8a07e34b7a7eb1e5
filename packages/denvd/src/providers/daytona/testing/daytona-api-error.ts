/**
 * An error the Daytona double answers with. The API (NestJS) answers `{statusCode, message,
 * error}`; the toolbox daemon answers `{statusCode, message, code, source: "DAYTONA_DAEMON"}`,
 * whose `code` the SDK maps to its specific error classes (DaytonaFileNotFoundError, ...).
 */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly code?: string,
  ) {
    super(message);
  }
}

const REASONS: Record<number, string> = {
  400: "Bad Request",
  401: "Unauthorized",
  403: "Forbidden",
  404: "Not Found",
  408: "Request Timeout",
  409: "Conflict",
  500: "Internal Server Error",
};

/** The JSON body Daytona sends for an error of the API (`daemon: false`) or of the toolbox. */
export function errorBody(e: ApiError, daemon: boolean, path: string): object {
  if (!daemon) return { statusCode: e.status, message: e.message, error: REASONS[e.status] ?? "Error" };
  return {
    statusCode: e.status,
    message: e.message,
    ...(e.code ? { code: e.code, source: "DAYTONA_DAEMON" } : {}),
    path,
    timestamp: new Date().toISOString(),
  };
}
