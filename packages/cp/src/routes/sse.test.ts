import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FakeHost } from "../testing/fake-host.js";
import { startTestCp, type TestCp } from "../testing/harness.js";

interface Event {
  id?: number;
  event: string;
  data: Record<string, unknown>;
}

/** Reads server-sent events as they arrive; `next` waits for the next complete event. */
async function openLog(t: TestCp, id: string, headers: Record<string, string> = {}) {
  const res = await fetch(`${t.url}/v1/deployments/${id}/log`, {
    headers: { authorization: `Bearer ${t.cp.adminToken}`, ...headers },
  });
  expect(res.status).toBe(200);
  expect(res.headers.get("content-type")).toBe("text/event-stream");
  const reader = (res.body as ReadableStream<Uint8Array>).getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  const events: Event[] = [];
  const next = async (): Promise<Event | undefined> => {
    for (;;) {
      const cut = buffer.indexOf("\n\n");
      if (cut >= 0) {
        const block = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        if (block.startsWith(":")) continue;
        const e: Event = { event: "", data: {} };
        for (const line of block.split("\n")) {
          const [k, ...rest] = line.split(": ");
          const v = rest.join(": ");
          if (k === "id") e.id = Number(v);
          if (k === "event") e.event = v;
          if (k === "data") e.data = JSON.parse(v);
        }
        events.push(e);
        return e;
      }
      const { value, done } = await reader.read();
      if (done) return undefined;
      buffer += decoder.decode(value, { stream: true });
    }
  };
  const rest = async () => {
    while (await next());
    return events;
  };
  return { next, rest, events };
}

describe("GET /v1/deployments/:id/log (server-sent events)", () => {
  let t: TestCp;
  let h: FakeHost;
  beforeAll(async () => {
    t = await startTestCp();
    h = await t.host({ stepDelayMs: 5 });
    await t.admin.post("/v1/projects", { name: "shop" });
  });
  afterAll(() => t.close());

  it("follows a running deployment live, then replays it whole once it is done", async () => {
    h.hold = (c) => c.kind === "env.snapshot";
    const d = (await t.admin.upload("POST", "/v1/projects/shop/deploy", Buffer.from("tar"))).body;
    const live = await openLog(t, d.id);
    // Phases arrive while the deployment is still running (the snapshot is held).
    for (;;) {
      const e = await live.next();
      if (e?.event === "phase" && e.data.name === "snapshot" && e.data.status === "running") break;
    }
    expect((await t.admin.get(`/v1/deployments/${d.id}`)).body.status).toBe("running");
    const snap = await h.command("env.snapshot");
    h.hold = () => false;
    h.release(snap.id);
    const events = await live.rest();
    const done = events.at(-1);
    expect(done?.event).toBe("done");
    expect(done?.data).toMatchObject({ id: d.id, status: "succeeded" });
    const ids = events.filter((e) => e.id !== undefined).map((e) => e.id as number);
    expect(ids).toEqual([...ids].sort((a, b) => a - b));
    expect(new Set(ids).size).toBe(ids.length);
    const phases = events.filter((e) => e.event === "phase").map((e) => `${e.data.name}:${e.data.status}`);
    expect(phases).toContain("place:succeeded");
    expect(phases.indexOf("build:running")).toBeLessThan(phases.indexOf("build:succeeded"));
    expect(phases.at(-1)).toBe("switch:succeeded");
    expect(events.some((e) => e.event === "log" && e.data.line === "build done")).toBe(true);

    const replay = await (await openLog(t, d.id)).rest();
    expect(replay.map((e) => [e.id, e.event])).toEqual(events.map((e) => [e.id, e.event]));

    const after = ids[4] as number;
    const resumed = await (await openLog(t, d.id, { "last-event-id": String(after) })).rest();
    expect(resumed[0]?.id).toBe(after + 1);
    expect(resumed.at(-1)?.event).toBe("done");
  });

  it("is authorized like the deployment itself", async () => {
    const d = (await t.admin.get("/v1/projects/shop/deployments")).body.deployments[0];
    expect((await t.anon.get(`/v1/deployments/${d.id}/log`)).status).toBe(401);
    expect((await t.admin.get("/v1/deployments/dep_nope/log")).status).toBe(404);
  });
});
