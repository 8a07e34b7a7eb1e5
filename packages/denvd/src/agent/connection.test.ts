import { PROTOCOL_VERSION, type RawFrame } from "@denv/spec";
import { afterEach, describe, expect, it } from "vitest";
import { backoffDelay, Connection, streamUrl } from "./connection.js";
import { FakeCp } from "./testing/fake-cp.js";

describe("the connection to the control plane", () => {
  const cleanup: Array<() => Promise<void>> = [];
  afterEach(async () => {
    for (const c of cleanup.splice(0).reverse()) await c();
  });

  async function dial(cp: FakeCp, credential: string, heartbeatMs = 100) {
    const logs: string[] = [];
    const frames: RawFrame[] = [];
    let opens = 0;
    let send: (f: RawFrame) => boolean = () => false;
    const conn = new Connection({
      url: cp.url,
      credential,
      heartbeatMs,
      backoff: { initialMs: 20, maxMs: 100 },
      log: (event, fields) => logs.push(`${event} ${JSON.stringify(fields ?? {})}`),
      handlers: {
        onOpen: (s) => {
          opens++;
          send = s;
          s(hello);
        },
        onFrame: (f) => frames.push(f),
        onClose: () => undefined,
      },
    });
    conn.start();
    cleanup.push(() => conn.stop());
    return { logs, frames, opens: () => opens, send: (f: RawFrame) => send(f) };
  }

  const hello = {
    v: PROTOCOL_VERSION,
    type: "hello",
    host_id: "h",
    version: "0.1.0",
    capacity: { cpus: 1, memory_bytes: 1, disk_free_bytes: 1 },
    labels: {},
    environments: [],
    versions: [],
    unfinished: [],
    capabilities: { binary_data: true },
  } satisfies RawFrame;
  const data = (seq: number, text: string): RawFrame => ({
    v: PROTOCOL_VERSION,
    type: "data",
    stream: "s-1",
    seq,
    channel: "stdout",
    data: Buffer.from(text),
  });

  it("derives the stream URL from the control plane URL", () => {
    expect(streamUrl("http://cp:8080")).toBe("ws://cp:8080/v1/hosts/stream");
    expect(streamUrl("https://denv.example/base/")).toBe("wss://denv.example/base/v1/hosts/stream");
  });

  it("backs off exponentially, capped, with jitter", () => {
    const b = { initialMs: 500, maxMs: 30_000 };
    expect(backoffDelay(0, b, () => 0)).toBe(250);
    expect(backoffDelay(0, b, () => 1)).toBe(500);
    expect(backoffDelay(3, b, () => 1)).toBe(4000);
    expect(backoffDelay(20, b, () => 0)).toBe(15_000);
    expect(backoffDelay(20, b, () => 1)).toBe(30_000);
  });

  it("drops a control plane that stops answering heartbeats, and dials again", async () => {
    const cp = await FakeCp.start({ answerHeartbeats: false });
    cleanup.push(() => cp.close());
    const c = await dial(cp, cp.credential);
    await cp.waitConnections(2, 5_000);
    await expect.poll(() => c.opens(), { timeout: 2_000 }).toBeGreaterThanOrEqual(2);
    expect(c.logs.some((l) => l.startsWith('control plane silent {"missed":3}'))).toBe(true);
  });

  it("says what the control plane answered when it refuses the credential, and keeps trying", async () => {
    const cp = await FakeCp.start();
    cleanup.push(() => cp.close());
    const c = await dial(cp, "not-the-credential");
    await new Promise((r) => setTimeout(r, 400));
    expect(cp.refused).toBeGreaterThanOrEqual(2);
    expect(c.opens()).toBe(0);
    const refused = c.logs.find((l) => l.startsWith("connect refused"));
    expect(refused).toContain('"status":401');
    expect(refused).toContain('"message":"unknown host credential"');
    expect(c.logs.join("\n")).not.toContain("not-the-credential");
  });

  it("sends data frames as JSON to a control plane that did not say it takes binary ones", async () => {
    const cp = await FakeCp.start();
    cleanup.push(() => cp.close());
    const c = await dial(cp, cp.credential);
    await cp.waitFor((f) => f.type === "hello", 5_000);
    // A heartbeat round later: a capabilities answer, had there been one, would be in.
    await cp.waitFor((f) => f.type === "heartbeat", 5_000);
    expect(c.send(data(0, "as json"))).toBe(true);
    const got = await cp.waitFor((f) => f.type === "data", 5_000);
    expect(got).toMatchObject({ stream: "s-1", seq: 0, data: Buffer.from("as json").toString("base64") });
    expect(cp.binaryIn).toBe(0);
  });

  it("sends binary data frames once the control plane said it takes them, and takes both kinds", async () => {
    const cp = await FakeCp.start({ binaryData: true });
    cleanup.push(() => cp.close());
    const c = await dial(cp, cp.credential);
    await expect.poll(() => c.logs.some((l) => l.startsWith("binary data frames"))).toBe(true);
    c.send(data(0, "as binary"));
    const got = await cp.waitFor((f) => f.type === "data", 5_000);
    expect(got).toMatchObject({ stream: "s-1", seq: 0, data: Buffer.from("as binary").toString("base64") });
    expect(cp.binaryIn).toBe(1);
    cp.sendBinary({ stream: "s-2", seq: 0, channel: "file", data: Buffer.from("raw") });
    cp.send({ v: PROTOCOL_VERSION, type: "data", stream: "s-2", seq: 1, channel: "file", data: "YjY0" });
    await expect.poll(() => c.frames.length).toBe(2);
    expect(c.frames.map((f) => (f.type === "data" ? Buffer.from(f.data).toString() : f.type))).toEqual([
      "raw",
      "b64",
    ]);
  });

  it("closes the connection on a malformed binary frame, says why in one line, and dials again", async () => {
    const cp = await FakeCp.start({ binaryData: true });
    cleanup.push(() => cp.close());
    const c = await dial(cp, cp.credential);
    await cp.waitConnections(1, 5_000);
    await cp.waitFor((f) => f.type === "hello", 5_000);
    cp.sendBinary(new Uint8Array([0xd1, 9, 0, 1, 0x73, 0, 0, 0, 0, 0, 0, 0, 0]));
    await cp.waitConnections(2, 5_000);
    const refused = c.logs.find((l) => l.startsWith("frame refused"));
    expect(refused).toBe(
      'frame refused {"reason":"protocol: binary data frame of 13 bytes: unknown channel 9"}',
    );
    expect(c.frames).toEqual([]);
  });
});
