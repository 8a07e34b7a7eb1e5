import { Writable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { type Frame, INITIAL_WINDOW, MAX_DATA_CHUNK, PROTOCOL_VERSION } from "@denv/spec";
import { describe, expect, it } from "vitest";
import { InboundStream, OutboundStream } from "./streams.js";

const data = (stream: string, seq: number, bytes: Buffer): Extract<Frame, { type: "data" }> => ({
  v: PROTOCOL_VERSION,
  type: "data",
  stream,
  seq,
  channel: "stdin",
  data: bytes.toString("base64"),
});

describe("stream flow control", () => {
  it("an outbound stream never has more than its credit in flight, and says when to wait", () => {
    const sent: Frame[] = [];
    const out = new OutboundStream("s", (f) => sent.push(f) > 0);
    const big = Buffer.alloc(INITIAL_WINDOW + 3 * MAX_DATA_CHUNK, 7);
    expect(out.write("stdout", big)).toBe(false);
    const bytesSent = () =>
      sent.reduce((n, f) => n + (f.type === "data" ? Buffer.from(f.data, "base64").length : 0), 0);
    expect(bytesSent()).toBe(INITIAL_WINDOW);
    let drained = false;
    out.once("drain", () => {
      drained = true;
    });
    out.grant(2 * MAX_DATA_CHUNK);
    expect(bytesSent()).toBe(INITIAL_WINDOW + 2 * MAX_DATA_CHUNK);
    expect(drained).toBe(false);
    out.grant(10 * MAX_DATA_CHUNK);
    expect(drained).toBe(true);
    expect(bytesSent()).toBe(big.length);
    expect(
      sent.every((f) => f.type !== "data" || Buffer.from(f.data, "base64").length <= MAX_DATA_CHUNK),
    ).toBe(true);
    expect(sent.map((f) => (f.type === "data" ? f.seq : -1))).toEqual(sent.map((_, i) => i));
  });

  it("ends only after what was queued is sent", async () => {
    const sent: Frame[] = [];
    const out = new OutboundStream("s", (f) => sent.push(f) > 0);
    out.write("file", Buffer.alloc(INITIAL_WINDOW + 10));
    const done = out.end();
    expect(sent.at(-1)?.type).toBe("data");
    out.grant(10);
    await done;
    expect(sent.at(-1)).toEqual({ v: 1, type: "end", stream: "s" });
  });

  it("an inbound stream grants credit only as its consumer drains it", async () => {
    const sent: Frame[] = [];
    const inbound = new InboundStream("s", (f) => sent.push(f) > 0);
    const windows = () => sent.reduce((n, f) => n + (f.type === "window" ? f.bytes : 0), 0);
    // The writer fills the whole initial window; nobody reads yet: no more credit.
    for (let i = 0; i < INITIAL_WINDOW / MAX_DATA_CHUNK; i++) {
      inbound.accept(data("s", i, Buffer.alloc(MAX_DATA_CHUNK)));
    }
    await new Promise((r) => setImmediate(r));
    expect(windows()).toBe(0);
    // A consumer reads everything: the window opens again by what it took.
    let got = 0;
    const sink = new Writable({
      write(chunk: Buffer, _e, cb) {
        got += chunk.length;
        cb();
      },
    });
    const piping = pipeline(inbound, sink);
    await new Promise((r) => setTimeout(r, 20));
    expect(got).toBe(INITIAL_WINDOW);
    expect(windows()).toBe(INITIAL_WINDOW);
    inbound.finish();
    await piping;
  });

  it("fails a stream whose writer oversteps its window or skips a frame", async () => {
    const inbound = new InboundStream("s", () => true, 1024);
    const failed = new Promise<Error>((r) => inbound.once("error", r));
    inbound.accept(data("s", 0, Buffer.alloc(2048)));
    expect((await failed).message).toMatch(/beyond its window/);

    const other = new InboundStream("t", () => true);
    const failed2 = new Promise<Error>((r) => other.once("error", r));
    other.accept(data("t", 1, Buffer.alloc(1)));
    expect((await failed2).message).toMatch(/data frame 1 arrived, 0 was expected/);
  });
});
