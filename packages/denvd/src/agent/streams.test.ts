import { Writable } from "node:stream";
import { pipeline } from "node:stream/promises";
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

const data = (stream: string, seq: number, bytes: Buffer): RawDataFrame => ({
  v: PROTOCOL_VERSION,
  type: "data",
  stream,
  seq,
  channel: "stdin",
  data: bytes,
});
const dataBytes = (f: RawFrame) => (f.type === "data" ? f.data.length : 0);

describe("stream flow control", () => {
  it("an outbound stream never has more than its credit in flight, and says when to wait", () => {
    const sent: RawFrame[] = [];
    const out = new OutboundStream("s", (f) => sent.push(f) > 0);
    const big = Buffer.alloc(INITIAL_WINDOW + 3 * MAX_DATA_CHUNK, 7);
    expect(out.write("stdout", big)).toBe(false);
    const bytesSent = () => sent.reduce((n, f) => n + dataBytes(f), 0);
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
    expect(sent.every((f) => dataBytes(f) <= MAX_DATA_CHUNK)).toBe(true);
    expect(sent.map((f) => (f.type === "data" ? f.seq : -1))).toEqual(sent.map((_, i) => i));
  });

  it("ends only after what was queued is sent", async () => {
    const sent: RawFrame[] = [];
    const out = new OutboundStream("s", (f) => sent.push(f) > 0);
    out.write("file", Buffer.alloc(INITIAL_WINDOW + 10));
    const done = out.end();
    expect(sent.at(-1)?.type).toBe("data");
    out.grant(10);
    await done;
    expect(sent.at(-1)).toEqual({ v: 1, type: "end", stream: "s" });
  });

  it("an inbound stream grants credit only as its consumer drains it", async () => {
    const sent: RawFrame[] = [];
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

  it("a bulk stream: its reader widens the window at once, its writer sends larger frames", async () => {
    const sent: RawFrame[] = [];
    const inbound = new InboundStream("b", (f) => sent.push(f) > 0);
    inbound.widen(BULK_WINDOW);
    inbound.widen(INITIAL_WINDOW);
    expect(sent).toEqual([
      { v: PROTOCOL_VERSION, type: "window", stream: "b", bytes: BULK_WINDOW - INITIAL_WINDOW },
    ]);
    // A writer within the wider window is taken; one byte beyond it fails the stream.
    let seq = 0;
    for (let n = 0; n < BULK_WINDOW; n += MAX_BULK_CHUNK)
      inbound.accept(data("b", seq++, Buffer.alloc(MAX_BULK_CHUNK)));
    expect(inbound.destroyed).toBe(false);
    const failed = new Promise<Error>((r) => inbound.once("error", r));
    inbound.accept(data("b", seq++, Buffer.alloc(1)));
    expect((await failed).message).toMatch(/beyond its window/);

    const out: RawFrame[] = [];
    const writer = new OutboundStream("w", (f) => out.push(f) > 0).bulk();
    writer.grant(BULK_WINDOW);
    expect(writer.write("file", Buffer.alloc(2 * MAX_BULK_CHUNK + 1))).toBe(true);
    // Whole frames go at once; the rest waits a turn of the event loop for more to join it.
    expect(out.map(dataBytes)).toEqual([MAX_BULK_CHUNK, MAX_BULK_CHUNK]);
    await new Promise((r) => setImmediate(r));
    expect(out.map(dataBytes)).toEqual([MAX_BULK_CHUNK, MAX_BULK_CHUNK, 1]);
    // Small writes of one turn (a record's header, body, checksum) make one frame, in order.
    out.length = 0;
    for (const piece of ["head", "body", "sum"]) writer.write("file", Buffer.from(piece));
    expect(out).toEqual([]);
    await new Promise((r) => setImmediate(r));
    expect(out.map((f) => (f.type === "data" ? Buffer.from(f.data).toString() : f.type))).toEqual([
      "headbodysum",
    ]);
    await writer.end();
    expect(out.at(-1)).toEqual({ v: PROTOCOL_VERSION, type: "end", stream: "w" });
    expect(out.filter((f) => f.type === "data").map((f) => (f as { seq: number }).seq)).toEqual([3]);
  });

  it("fails a stream on a data frame larger than MAX_BULK_CHUNK", async () => {
    const inbound = new InboundStream("s", () => true, BULK_WINDOW);
    const failed = new Promise<Error>((r) => inbound.once("error", r));
    inbound.accept(data("s", 0, Buffer.alloc(MAX_BULK_CHUNK + 1)));
    expect((await failed).message).toBe(
      `stream s: a data frame of ${MAX_BULK_CHUNK + 1} bytes, more than ${MAX_BULK_CHUNK}`,
    );
  });

  it("a bulk writer's buffer is released once no frame needs it: after its frame was sent, or once copied", async () => {
    const frames: Array<{ frame: RawFrame; sent?: () => void }> = [];
    const out = new OutboundStream(
      "l",
      (frame, sent) => frames.push({ frame, ...(sent ? { sent } : {}) }) > 0,
    ).bulk();
    out.grant(BULK_WINDOW);
    const released: string[] = [];
    // A whole frame's worth: sent as a view of the buffer, released when the frame was written.
    out.write("file", Buffer.alloc(MAX_BULK_CHUNK, 1), () => released.push("big"));
    expect(frames).toHaveLength(1);
    expect(released).toEqual([]);
    frames[0]?.sent?.();
    expect(released).toEqual(["big"]);
    // Small pieces of one turn are joined into one frame: copies, so released at once.
    out.write("file", Buffer.from("a"), () => released.push("a"));
    out.write("file", Buffer.from("b"), () => released.push("b"));
    await new Promise((r) => setImmediate(r));
    expect(frames).toHaveLength(2);
    expect(frames[1]?.sent).toBeUndefined();
    expect(released).toEqual(["big", "a", "b"]);
    // Cut by credit into two frames: released after both were sent.
    const tight = new OutboundStream(
      "t",
      (frame, sent) => frames.push({ frame, ...(sent ? { sent } : {}) }) > 0,
    ).bulk();
    frames.length = 0;
    tight.write("file", Buffer.alloc(INITIAL_WINDOW + 10), () => released.push("cut"));
    expect(frames).toHaveLength(1);
    tight.grant(10);
    expect(frames).toHaveLength(2);
    frames[1]?.sent?.();
    expect(released.at(-1)).toBe("b");
    frames[0]?.sent?.();
    expect(released.at(-1)).toBe("cut");
    // A dropped stream lets go of what waited in it; what went out is released as it is written.
    const pending: Array<() => void> = [];
    const dropped = new OutboundStream("d", (_f, sent) => (sent ? pending.push(sent) : 0) >= 0).bulk();
    dropped.write("file", Buffer.alloc(INITIAL_WINDOW + 1), () => released.push("dropped"));
    dropped.drop();
    expect(released.at(-1)).toBe("cut");
    for (const sent of pending) sent();
    expect(released.at(-1)).toBe("dropped");
  });
});
