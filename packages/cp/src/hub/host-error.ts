import { DenvError, type ErrorCode, ErrorCodes } from "@denv/spec";

/**
 * A command's failure as the host reported it. `hostCode` keeps the host's own code, which may be
 * one of the protocol's (`interrupted`, `cancelled`) that has no HTTP status of its own.
 */
export class HostError extends DenvError {
  constructor(
    readonly hostCode: string,
    message: string,
    details: readonly string[] = [],
  ) {
    super(hostCode in ErrorCodes ? (hostCode as ErrorCode) : "internal", message, details);
  }
}

/** Raised into pending calls when the cp shuts down: deployments stay running and resume. */
export class ShutdownError extends Error {
  constructor() {
    super("the control plane is shutting down");
  }
}
