import {
  BULK_WINDOW,
  INITIAL_WINDOW,
  MAX_BULK_CHUNK,
  MAX_DATA_CHUNK,
  PROTOCOL_VERSION,
  type RawDataFrame,
  type RawFrame,
} from "@denv/spec";
import { describe, expect, it } from "vitest";
import { InboundStream, OutboundStream } from "./streams.js";

const data = (stream: string, seq: number, bytes: number): RawDataFrame => ({
  v: PROTOCOL_VERSION,
  type: "data",
  stream,
  seq,
  channel: "stdout",
  data: Buffer.alloc(bytes, 1),
});
const dataBytes = (f: RawFrame) => (f.type === "data" ? f.data.length : 0);

describe("credit-based streams", () => {
  it("inbound: holds at most one window, grants only as its consumer reads", async () => {
    const sent: RawFrame[] = [];
    const s = new InboundStream("s", (f) => sent.push(f));
    let seq = 0;
    for (let n = 0; n < INITIAL_WINDOW; n += MAX_DATA_CHUNK) s.accept(data("s", seq++, MAX_DATA_CHUNK));
    expect(s.buffered).toBe(INITIAL_WINDOW);
    // Nothing read yet: no credit granted beyond the initial window.
    expect(sent.filter((f) => f.type === "window")).toHaveLength(0);
    let read = 0;
    let granted = INITIAL_WINDOW;
    for await (const chunk of s) {
      read += (chunk as { data: Buffer }).data.length;
      granted = INITIAL_WINDOW + sent.reduce((a, f) => a + (f.type === "window" ? f.bytes : 0), 0);
      expect(granted - read).toBeLessThanOrEqual(INITIAL_WINDOW);
      if (read === INITIAL_WINDOW) s.finish();
    }
    expect(read).toBe(INITIAL_WINDOW);
    expect(s.maxBuffered).toBe(INITIAL_WINDOW);
  });

  it("inbound: a writer beyond its window, or out of order, breaks the stream", async () => {
    const over = new InboundStream("o", () => undefined);
    over.on("error", () => undefined);
    let seq = 0;
    for (let n = 0; n <= INITIAL_WINDOW; n += MAX_DATA_CHUNK) over.accept(data("o", seq++, MAX_DATA_CHUNK));
    expect(over.destroyed).toBe(true);
    expect(over.errored?.message).toMatch(/beyond its window/);
    const gap = new InboundStream("g", () => undefined);
    gap.on("error", () => undefined);
    gap.accept(data("g", 1, 10));
    expect(gap.errored?.message).toMatch(/frame 1 arrived where 0 was expected/);
  });

  it("outbound: never sends beyond credit, in chunks of at most MAX_DATA_CHUNK, waits for window frames", async () => {
    const sent: RawFrame[] = [];
    const s = new OutboundStream("w", (f) => sent.push(f));
    const total = INITIAL_WINDOW * 3 + 123;
    let finished = false;
    const writing = s.write("file", Buffer.alloc(total, 7)).then(() => {
      finished = true;
    });
    await new Promise((r) => setTimeout(r, 10));
    const bytes = () => sent.reduce((a, f) => a + dataBytes(f), 0);
    expect(bytes()).toBe(INITIAL_WINDOW);
    expect(finished).toBe(false);
    for (const f of sent) if (f.type === "data") expect(f.data.length).toBeLessThanOrEqual(MAX_DATA_CHUNK);
    s.grant(INITIAL_WINDOW);
    await new Promise((r) => setTimeout(r, 10));
    expect(bytes()).toBe(INITIAL_WINDOW * 2);
    s.grant(10 * INITIAL_WINDOW);
    await writing;
    expect(bytes()).toBe(total);
    expect(sent.map((f) => (f.type === "data" ? f.seq : -1))).toEqual(sent.map((_f, i) => i));
    s.end();
    expect(sent.at(-1)).toEqual({ v: PROTOCOL_VERSION, type: "end", stream: "w" });
    await expect(s.write("file", Buffer.from("late"))).rejects.toThrow(/closed/);
  });

  it("outbound: a dropped stream releases a writer waiting for credit", async () => {
    const s = new OutboundStream("d", () => undefined);
    const writing = s.write("stdin", Buffer.alloc(INITIAL_WINDOW + 1));
    s.drop(new Error("the connection is gone"));
    await expect(writing).rejects.toThrow("the connection is gone");
  });

  it("bulk: the inbound side grants a larger window at once, and still holds at most that window", async () => {
    const sent: RawFrame[] = [];
    const s = new InboundStream("b", (f) => sent.push(f), BULK_WINDOW);
    expect(sent).toEqual([
      { v: PROTOCOL_VERSION, type: "window", stream: "b", bytes: BULK_WINDOW - INITIAL_WINDOW },
    ]);
    const grants = () => sent.reduce((a, f) => a + (f.type === "window" ? f.bytes : 0), INITIAL_WINDOW);
    let seq = 0;
    let written = 0;
    const total = 3 * BULK_WINDOW;
    // The writer sends as fast as its credit allows; the consumer reads slowly.
    const write = () => {
      while (written < total && grants() - written >= MAX_BULK_CHUNK) {
        s.accept(data("b", seq++, MAX_BULK_CHUNK));
        written += MAX_BULK_CHUNK;
      }
      if (written === total) s.finish();
    };
    write();
    expect(s.buffered).toBe(BULK_WINDOW);
    let read = 0;
    for await (const chunk of s) {
      read += (chunk as { data: Buffer }).data.length;
      await new Promise((r) => setImmediate(r));
      write();
    }
    expect(read).toBe(total);
    expect(s.maxBuffered).toBe(BULK_WINDOW);
    expect(grants() - read).toBeLessThanOrEqual(BULK_WINDOW);
  });

  it("bulk: the outbound side sends frames of up to MAX_BULK_CHUNK; a data frame above it fails an inbound stream", async () => {
    const sent: RawFrame[] = [];
    const out = new OutboundStream("o", (f) => sent.push(f), MAX_BULK_CHUNK);
    out.grant(BULK_WINDOW);
    await out.write("file", Buffer.alloc(2 * MAX_BULK_CHUNK + 5));
    expect(sent.map(dataBytes)).toEqual([MAX_BULK_CHUNK, MAX_BULK_CHUNK, 5]);
    const big = new InboundStream("big", () => undefined, BULK_WINDOW);
    big.on("error", () => undefined);
    big.accept(data("big", 0, MAX_BULK_CHUNK + 1));
    expect(big.errored?.message).toBe(
      `stream big: a data frame of ${MAX_BULK_CHUNK + 1} bytes, more than ${MAX_BULK_CHUNK}`,
    );
  });
});
