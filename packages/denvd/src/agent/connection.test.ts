import { PROTOCOL_VERSION } from "@denv/spec";
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
    let opens = 0;
    const conn = new Connection({
      url: cp.url,
      credential,
      heartbeatMs,
      backoff: { initialMs: 20, maxMs: 100 },
      log: (event, fields) => logs.push(`${event} ${JSON.stringify(fields ?? {})}`),
      handlers: {
        onOpen: (send) => {
          opens++;
          send({ v: PROTOCOL_VERSION, type: "heartbeat", ts: Date.now() });
        },
        onFrame: () => undefined,
        onClose: () => undefined,
      },
    });
    conn.start();
    cleanup.push(() => conn.stop());
    return { logs, opens: () => opens };
  }

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
});
