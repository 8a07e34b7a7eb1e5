import {
  BULK_WINDOW,
  decodeBinaryData,
  encodeBinaryData,
  type Frame,
  INITIAL_WINDOW,
  MAX_BULK_CHUNK,
  PROTOCOL_VERSION,
  parseFrame,
  type RawDataFrame,
} from "@denv/spec";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { WebSocket, WebSocketServer } from "ws";
import type { Log } from "../log.js";
import { HostHub } from "./hub.js";

/**
 * A host session's binary data frames, against a hub and a raw WebSocket standing in for denvd:
 * negotiated in hello, checked as strictly as JSON ones, and never a crash.
 */

const quiet: Log = { debug: () => {}, info: () => {}, warn: () => {}, error: () => {} };

interface RawHost {
  ws: WebSocket;
  /** Text frames and decoded binary frames from the cp, in order. */
  got: Array<{ binary: boolean; frame: Frame | RawDataFrame }>;
  closed: Promise<{ code: number; reason: string }>;
  json(f: object): void;
  binary(f: Omit<RawDataFrame, "v" | "type">): void;
}

const resume = { complete: false, chain_ids: [], done: [] };

describe("host sessions: binary data frames", () => {
  let hub: HostHub;
  let server: WebSocketServer;
  let port = 0;
  let n = 0;

  beforeAll(async () => {
    hub = new HostHub({ lifecycle: { online: async () => {}, offline: async () => {} }, log: quiet });
    server = new WebSocketServer({ host: "127.0.0.1", port: 0 });
    server.on("connection", (socket, req) => {
      hub.accept(socket, new URL(req.url ?? "/", "http://cp").searchParams.get("host") ?? "");
    });
    await new Promise((r) => server.once("listening", r));
    port = (server.address() as { port: number }).port;
  });
  afterAll(async () => {
    await hub.close();
    await new Promise((r) => server.close(r));
  });

  async function connect(binaryData: boolean | undefined, hello = true): Promise<RawHost & { id: string }> {
    const id = `h${n++}`;
    const ws = new WebSocket(`ws://127.0.0.1:${port}/?host=${id}`);
    const got: RawHost["got"] = [];
    ws.on("message", (data, isBinary) => {
      got.push(
        isBinary
          ? { binary: true, frame: decodeBinaryData(data as Buffer) }
          : { binary: false, frame: parseFrame(data.toString()) },
      );
    });
    const closed = new Promise<{ code: number; reason: string }>((r) =>
      ws.once("close", (code, reason) => r({ code, reason: reason.toString() })),
    );
    await new Promise((r) => ws.once("open", r));
    const host: RawHost & { id: string } = {
      id,
      ws,
      got,
      closed,
      json: (f) => ws.send(JSON.stringify({ v: PROTOCOL_VERSION, ...f })),
      binary: (f) => {
        const msg = encodeBinaryData({ v: PROTOCOL_VERSION, type: "data", ...f });
        if (!msg) throw new Error("not encodable");
        ws.send(msg);
      },
    };
    if (hello) {
      host.json({
        type: "hello",
        host_id: id,
        version: "0.1.0",
        capacity: { cpus: 1, memory_bytes: 1, disk_free_bytes: 1 },
        labels: {},
        environments: [],
        versions: [],
        unfinished: [],
        ...(binaryData === undefined ? {} : { capabilities: { binary_data: binaryData } }),
      });
      await expect.poll(() => hub.isOnline(id)).toBe(true);
    }
    return host;
  }

  const sendStream = (host: { id: string }, name: string) =>
    hub.stream(host.id, "version.send", (stream) => ({ version: "p@v1", stream, resume }), {
      id: name,
      timeoutMs: 30_000,
      bulk: true,
    });

  it("answers every hello with its capabilities, first; data goes binary only to a host that took it", async () => {
    for (const takes of [true, false, undefined]) {
      const host = await connect(takes);
      await expect.poll(() => host.got.length).toBeGreaterThan(0);
      expect(host.got[0]).toMatchObject({
        binary: false,
        frame: { type: "heartbeat", capabilities: { binary_data: true } },
      });
      const call = sendStream(host, `out-${host.id}`);
      await call.outbound.write("file", Buffer.from("hello host"));
      await expect.poll(() => host.got.some((g) => g.frame.type === "data")).toBe(true);
      const data = host.got.find((g) => g.frame.type === "data");
      expect(data?.binary).toBe(takes === true);
      const bytes = data?.frame.type === "data" ? data.frame.data : "";
      expect(Buffer.from(typeof bytes === "string" ? Buffer.from(bytes, "base64") : bytes).toString()).toBe(
        "hello host",
      );
      // A bulk stream's reader granted the rest of its window before the command went out.
      const window = host.got.find((g) => g.frame.type === "window");
      expect(window?.frame).toEqual({
        v: PROTOCOL_VERSION,
        type: "window",
        stream: call.streamId,
        bytes: BULK_WINDOW - INITIAL_WINDOW,
      });
      call.close();
      host.ws.close();
    }
  });

  it("takes a host's binary data frames (and JSON ones) on one stream, in seq order", async () => {
    const host = await connect(true);
    const call = sendStream(host, "in-ok");
    host.binary({ stream: call.streamId, seq: 0, channel: "file", data: Buffer.from("one ") });
    host.json({
      type: "data",
      stream: call.streamId,
      seq: 1,
      channel: "file",
      data: Buffer.from("two ").toString("base64"),
    });
    host.binary({ stream: call.streamId, seq: 2, channel: "file", data: Buffer.alloc(MAX_BULK_CHUNK, 0x41) });
    host.json({ type: "end", stream: call.streamId });
    const chunks: Buffer[] = [];
    for await (const c of call.inbound) chunks.push((c as { data: Buffer }).data);
    const all = Buffer.concat(chunks);
    expect(all.subarray(0, 8).toString()).toBe("one two ");
    expect(all.length).toBe(8 + MAX_BULK_CHUNK);
    call.close();
    host.ws.close();
  });

  it("drops binary frames of unknown streams; fails a stream on a seq gap or beyond its window", async () => {
    const host = await connect(true);
    host.binary({ stream: "nobody", seq: 0, channel: "file", data: Buffer.from("late") });
    const gap = sendStream(host, "gap");
    host.binary({ stream: gap.streamId, seq: 1, channel: "file", data: Buffer.from("x") });
    await expect
      .poll(() => gap.inbound.errored?.message)
      .toBe(`stream ${gap.streamId}: data frame 1 arrived where 0 was expected`);
    const over = sendStream(host, "over");
    let seq = 0;
    for (let sent = 0; sent <= BULK_WINDOW; sent += MAX_BULK_CHUNK) {
      host.binary({ stream: over.streamId, seq: seq++, channel: "file", data: Buffer.alloc(MAX_BULK_CHUNK) });
    }
    await expect.poll(() => over.inbound.errored?.message).toMatch(/beyond its window/);
    // The connection is still up: those were stream errors.
    expect(hub.isOnline(host.id)).toBe(true);
    gap.close();
    over.close();
    host.ws.close();
  });

  it("closes the connection on a malformed binary frame with a one-line reason", async () => {
    const cases: Array<[Uint8Array, string]> = [
      [
        new Uint8Array([0xd1, 4, 0]),
        "protocol: binary data frame of 3 bytes: shorter than the 13-byte minimum header",
      ],
      [
        new Uint8Array([0xd1, 4, 0, 9, 0x73, 0, 0, 0, 0, 0, 0, 0, 0]),
        "protocol: binary data frame of 13 bytes: a stream id of 9 bytes runs past its end",
      ],
      [
        Buffer.from('{"v":1,"type":"heartbeat","ts":1}'),
        "protocol: binary data frame of 33 bytes: starts with 0x7b, not 0xd1",
      ],
    ];
    for (const [msg, reason] of cases) {
      const host = await connect(true);
      host.ws.send(msg);
      const { code, reason: said } = await host.closed;
      expect(code).toBe(1008);
      expect(said.startsWith(reason.slice(0, 100))).toBe(true);
      expect(said).not.toContain("\n");
      await expect.poll(() => hub.isOnline(host.id)).toBe(false);
    }
  });

  it("wants hello before any binary frame", async () => {
    const host = await connect(true, false);
    host.binary({ stream: "s", seq: 0, channel: "file", data: Buffer.from("early") });
    expect(await host.closed).toEqual({ code: 1008, reason: "protocol: the first frame must be hello" });
  });
});
