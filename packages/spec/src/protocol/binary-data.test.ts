import { describe, expect, it } from "vitest";
import {
  BINARY_DATA_MAGIC,
  DATA_CHANNELS,
  decodeBinaryData,
  encodeBinaryData,
  encodeBinaryHeader,
  MAX_BULK_CHUNK,
  PROTOCOL_VERSION,
  parseFrame,
  type RawDataFrame,
} from "./frames.js";

const frame = (over: Partial<RawDataFrame> = {}): RawDataFrame => ({
  v: PROTOCOL_VERSION,
  type: "data",
  stream: "dep_7.transfer.s1.s1-a1b2c3",
  seq: 41,
  channel: "file",
  data: new Uint8Array([0, 1, 2, 250, 255]),
  ...over,
});

function encoded(f: RawDataFrame): Uint8Array {
  const out = encodeBinaryData(f);
  if (!out) throw new Error("not encodable");
  return out;
}

/** A message laid out by hand: magic, channel, id length, id, seq (hi, lo), bytes. */
function message(o: { magic?: number; channel?: number; idLength?: number; id?: string; tail?: number[] }) {
  const id = new TextEncoder().encode(o.id ?? "s");
  const head = [o.magic ?? BINARY_DATA_MAGIC, o.channel ?? 4, 0, 0];
  const out = new Uint8Array([...head, ...id, ...(o.tail ?? [0, 0, 0, 0, 0, 0, 0, 7])]);
  new DataView(out.buffer).setUint16(2, o.idLength ?? id.length);
  return out;
}

describe("binary data frames", () => {
  it("round-trips every channel, an empty payload, a large seq and a non-ASCII stream id", () => {
    for (const channel of DATA_CHANNELS) {
      const f = frame({ channel });
      expect(decodeBinaryData(encoded(f))).toEqual(f);
    }
    const empty = frame({ data: new Uint8Array() });
    expect(decodeBinaryData(encoded(empty))).toEqual(empty);
    const far = frame({ seq: Number.MAX_SAFE_INTEGER, stream: "flux-é-✓" });
    expect(decodeBinaryData(encoded(far))).toEqual(far);
    const full = frame({ data: new Uint8Array(MAX_BULK_CHUNK).fill(9) });
    expect(decodeBinaryData(encoded(full)).data.length).toBe(MAX_BULK_CHUNK);
  });

  it("lays the header out as documented", () => {
    const out = encoded(frame({ stream: "ab", seq: 2 ** 32 + 5, channel: "stderr" }));
    expect([...out.subarray(0, 12)]).toEqual([0xd1, 2, 0, 2, 0x61, 0x62, 0, 0, 0, 1, 0, 0]);
    expect([...out.subarray(12, 14)]).toEqual([0, 5]);
    expect([...out.subarray(14)]).toEqual([0, 1, 2, 250, 255]);
  });

  it("decodes the bytes as a view into the message, without a copy", () => {
    const out = encoded(frame());
    const d = decodeBinaryData(out);
    expect(d.data.buffer).toBe(out.buffer);
  });

  it("decodes a message that came as fragments: header and bytes apart, or cut anywhere", () => {
    const f = frame({ data: new Uint8Array(1000).fill(3) });
    const header = encodeBinaryHeader(f) as Uint8Array;
    expect([...header, ...f.data]).toEqual([...encoded(f)]);
    // Header and bytes as two fragments: the bytes are the second fragment itself.
    const two = decodeBinaryData([header, f.data]);
    expect(two).toEqual(f);
    expect(two.data).toBe(f.data);
    const whole = encoded(f);
    for (const cuts of [[1], [3, 7], [header.length + 10], [5, header.length, header.length + 500]]) {
      const pieces: Uint8Array[] = [];
      let from = 0;
      for (const at of [...cuts, whole.length]) {
        pieces.push(whole.subarray(from, at));
        from = at;
      }
      expect(decodeBinaryData(pieces), String(cuts)).toEqual(f);
    }
    expect(decodeBinaryData([header])).toEqual({ ...f, data: new Uint8Array() });
    expect(() => decodeBinaryData([header.subarray(0, 2), new Uint8Array(3)])).toThrow(
      "protocol: binary data frame of 5 bytes: shorter than the 13-byte minimum header",
    );
    expect(() => decodeBinaryData([header, new Uint8Array(MAX_BULK_CHUNK), new Uint8Array(1)])).toThrow(
      `${MAX_BULK_CHUNK + 1} bytes of data, more than ${MAX_BULK_CHUNK}`,
    );
  });

  it("cannot encode an empty or over-long stream id (the caller sends JSON instead)", () => {
    expect(encodeBinaryData(frame({ stream: "" }))).toBeUndefined();
    expect(encodeBinaryData(frame({ stream: "x".repeat(70_000) }))).toBeUndefined();
  });

  it("refuses malformed messages with one line saying what is wrong", () => {
    const cases: Array<[Uint8Array, string]> = [
      [new Uint8Array(), "binary data frame of 0 bytes: shorter than the 13-byte minimum header"],
      [message({ tail: [0, 0, 0] }), "shorter than the 13-byte minimum header"],
      [message({ magic: 0x7b }), "starts with 0x7b, not 0xd1 (not a data frame of protocol version 1)"],
      [message({ channel: 5 }), "unknown channel 5"],
      [message({ idLength: 0 }), "empty stream id"],
      [message({ idLength: 200 }), "a stream id of 200 bytes runs past its end"],
      [message({ id: "s\u00ff", idLength: 2 }), "the stream id is not UTF-8"],
      [message({ tail: [0, 0x20, 0, 0, 0, 0, 0, 0] }), "seq is beyond 2^53 - 1"],
      [
        new Uint8Array([...message({}), ...new Uint8Array(MAX_BULK_CHUNK + 1)]),
        `${MAX_BULK_CHUNK + 1} bytes of data, more than ${MAX_BULK_CHUNK}`,
      ],
    ];
    for (const [msg, why] of cases) {
      let err: unknown;
      try {
        decodeBinaryData(msg);
      } catch (e) {
        err = e;
      }
      expect(err, why).toBeInstanceOf(Error);
      expect((err as Error).message).toContain(why);
      expect((err as Error).message).toMatch(/^protocol: binary data frame of \d+ bytes: /);
      expect((err as Error).message).not.toContain("\n");
    }
  });

  it("capabilities are optional in hello and heartbeat frames: older peers' frames still parse", () => {
    const hello = {
      v: 1,
      type: "hello",
      host_id: "h",
      version: "0.1.0",
      capacity: { cpus: 1, memory_bytes: 1, disk_free_bytes: 1 },
      labels: {},
      environments: [],
      versions: [],
      unfinished: [],
    };
    expect(parseFrame(JSON.stringify(hello))).not.toHaveProperty("capabilities");
    expect(parseFrame(JSON.stringify({ ...hello, capabilities: { binary_data: true } }))).toMatchObject({
      capabilities: { binary_data: true },
    });
    expect(
      parseFrame(JSON.stringify({ v: 1, type: "heartbeat", ts: 1, capabilities: { binary_data: true } })),
    ).toMatchObject({ capabilities: { binary_data: true } });
  });
});
