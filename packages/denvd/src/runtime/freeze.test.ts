import { describe, expect, it } from "vitest";
import { FREEZE_ATTEMPTS, type Freezer, freezeAll } from "./freeze.js";

/** An engine whose pause fails for the ids and the number of calls given, and that keeps state. */
function engine(fail: (id: string, call: number) => Error | undefined) {
  const paused = new Set<string>();
  const calls = new Map<string, number>();
  const e: Freezer = {
    async pause(id) {
      const n = (calls.get(id) ?? 0) + 1;
      calls.set(id, n);
      const err = fail(id, n);
      if (err) throw err;
      paused.add(id);
    },
    async unpause(id) {
      paused.delete(id);
    },
  };
  return { e, paused, calls };
}

const freezeError = () =>
  new Error("pause c2: Cannot pause container c2: OCI runtime pause failed: unable to freeze: unknown");

describe("freezeAll", () => {
  it("pauses every container", async () => {
    const { e, paused } = engine(() => undefined);
    expect(await freezeAll(e, ["c1", "c2", "c3"])).toEqual({ attempts: 1 });
    expect([...paused].sort()).toEqual(["c1", "c2", "c3"]);
  });

  it("retries the freezer's 'unable to freeze' and ends with every container paused", async () => {
    const { e, paused, calls } = engine((id, n) => (id === "c2" && n < 3 ? freezeError() : undefined));
    expect(await freezeAll(e, ["c1", "c2"])).toEqual({ attempts: 3 });
    expect([...paused].sort()).toEqual(["c1", "c2"]);
    expect(calls.get("c1")).toBe(3);
  });

  it(`gives up after ${FREEZE_ATTEMPTS} attempts with nothing left paused`, async () => {
    const { e, paused, calls } = engine((id) => (id === "c2" ? freezeError() : undefined));
    await expect(freezeAll(e, ["c1", "c2", "c3"])).rejects.toThrow(/unable to freeze/);
    expect(paused.size).toBe(0);
    expect(calls.get("c2")).toBe(FREEZE_ATTEMPTS);
  });

  it("does not retry another failure, and thaws what froze before it", async () => {
    const { e, paused, calls } = engine((id) =>
      id === "c3" ? new Error("pause c3: no such container") : undefined,
    );
    await expect(freezeAll(e, ["c1", "c2", "c3"])).rejects.toThrow("pause c3: no such container");
    expect(paused.size).toBe(0);
    expect(calls.get("c3")).toBe(1);
  });
});
