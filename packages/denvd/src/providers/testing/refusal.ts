import { DenvError } from "@denv/spec";
import { expect } from "vitest";

/** What `p` was refused with: it must reject, and with a DenvError (for tests of the refusals). */
export async function refusal(p: Promise<unknown>): Promise<DenvError> {
  const e = await p.then(
    () => undefined,
    (err: unknown) => err,
  );
  expect(e).toBeInstanceOf(DenvError);
  return e as DenvError;
}
