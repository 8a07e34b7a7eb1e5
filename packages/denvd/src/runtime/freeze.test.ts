import { describe, expect, it } from "vitest";
import { type Freezer, freezeAll } from "./freeze.js";

const quick = { patienceMs: 50, firstWaitMs: 1, maxWaitMs: 2 };

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
    expect(await freezeAll(e, ["c1", "c2", "c3"])).toMatchObject({ attempts: 1 });
    expect([...paused].sort()).toEqual(["c1", "c2", "c3"]);
  });

  it("retries the freezer's 'unable to freeze' and ends with every container paused", async () => {
    const { e, paused, calls } = engine((id, n) => (id === "c2" && n < 3 ? freezeError() : undefined));
    const t0 = Date.now();
    const r = await freezeAll(e, ["c1", "c2"], quick);
    expect(r.attempts).toBe(3);
    // The window opens with the attempt that froze them, not with the first one.
    expect(r.frozenAt).toBeGreaterThan(t0);
    expect([...paused].sort()).toEqual(["c1", "c2"]);
    expect(calls.get("c1")).toBe(3);
  });

  it("gives up once its patience is spent, with nothing left paused", async () => {
    const { e, paused, calls } = engine((id) => (id === "c2" ? freezeError() : undefined));
    const t0 = Date.now();
    await expect(freezeAll(e, ["c1", "c2", "c3"], quick)).rejects.toThrow(/unable to freeze/);
    expect(Date.now() - t0).toBeGreaterThanOrEqual(quick.patienceMs);
    expect(paused.size).toBe(0);
    // Tried again and again meanwhile, every container each time.
    expect(calls.get("c2")).toBeGreaterThan(3);
    expect(calls.get("c1")).toBe(calls.get("c2"));
  });

  it("does not retry another failure, and thaws what froze before it", async () => {
    const { e, paused, calls } = engine((id) =>
      id === "c3" ? new Error("pause c3: no such container") : undefined,
    );
    await expect(freezeAll(e, ["c1", "c2", "c3"], quick)).rejects.toThrow("pause c3: no such container");
    expect(paused.size).toBe(0);
    expect(calls.get("c3")).toBe(1);
  });
});
