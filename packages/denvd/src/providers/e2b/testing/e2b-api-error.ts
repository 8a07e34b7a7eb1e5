/** A refusal of the E2B test double's control API: sent as {"code": status, "message"}. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}
