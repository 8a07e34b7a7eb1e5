import { describe, expect, it } from "vitest";
import { checkedResult } from "./checked-result.js";

/** No Docker: a handler's result is checked with spec's schema of its kind before it is sent. */

describe("checkedResult", () => {
  it("passes a result in its kind's shape", () => {
    expect(checkedResult("env.destroy", { environment: "shop/alpha", destroyed: true })).toEqual({
      ok: true,
      result: { environment: "shop/alpha", destroyed: true },
    });
  });

  it("turns a result in another shape into an internal error naming the fields", () => {
    const outcome = checkedResult("env.exec", { exitCode: 0, stdout: "", stderr: "", durationMs: 3 });
    expect(outcome.ok).toBe(false);
    expect(outcome.ok ? "" : outcome.error).toMatchObject({
      code: "internal",
      message: expect.stringMatching(
        /^denvd built a malformed env\.exec result \(a denvd bug\): exit_code: /,
      ),
    });
  });
});
