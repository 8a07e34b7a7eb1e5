import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DenvClient } from "./index.js";
import { type FakeControlPlane, startFakeControlPlane } from "./testing/fake-control-plane.js";

describe.each([
  ["with", true],
  ["without", false],
])("waitForDeployment, %s SSE event ids", (_label, sseIds) => {
  let fake: FakeControlPlane;

  beforeAll(async () => {
    fake = await startFakeControlPlane({ phaseDelayMs: 20, sseIds });
  });
  afterAll(() => fake?.close());

  it("reconnects after a dropped log stream and reports each phase change once", async () => {
    let drops = 0;
    // A proxy that cuts the first log stream after its first 300 bytes.
    const resumedFrom: (string | undefined)[] = [];
    const flaky: typeof fetch = async (input, init) => {
      if (String(input).endsWith("/log")) {
        resumedFrom.push((init?.headers as Record<string, string> | undefined)?.["last-event-id"]);
      }
      const res = await fetch(input, init);
      if (!String(input).endsWith("/log") || drops > 0 || res.body === null) return res;
      drops++;
      const reader = res.body.getReader();
      let sent = 0;
      const body = new ReadableStream<Uint8Array>({
        async pull(controller) {
          const { value, done } = await reader.read();
          if (done || sent > 300) {
            await reader.cancel();
            controller.error(new TypeError("terminated"));
            return;
          }
          sent += value.length;
          controller.enqueue(value);
        },
      });
      return new Response(body, { status: res.status, headers: res.headers });
    };
    const client = new DenvClient({ url: fake.url, token: fake.adminToken, fetch: flaky });
    const started = await client.snapshot("quickstart/alpha");
    const seen: string[] = [];
    const logs: string[] = [];
    const done = await client.waitForDeployment(started.id, {
      onPhase: (p) => seen.push(`${p.name}:${p.status}`),
      onLog: (l) => logs.push(l),
    });
    expect(drops).toBe(1);
    // With numbered events the second connection asks for what follows the last one seen.
    expect(resumedFrom[0]).toBeUndefined();
    if (sseIds) expect(Number(resumedFrom[1])).toBeGreaterThan(0);
    else expect(resumedFrom[1]).toBeUndefined();
    expect(done.status).toBe("succeeded");
    expect(seen).toEqual(
      ["freeze", "capture layers", "capture volumes", "thaw", "record"].flatMap((p) => [
        `${p}:running`,
        `${p}:succeeded`,
      ]),
    );
    expect(logs).toEqual(
      ["freeze", "capture layers", "capture volumes", "thaw", "record"].map((p) => `${p}: done`),
    );
  });

  it("yields the raw events of the log, past first", async () => {
    const client = new DenvClient({ url: fake.url, token: fake.adminToken });
    const started = await client.stop("quickstart/alpha");
    await client.waitForDeployment(started.id);
    const events = [];
    for await (const e of client.deploymentEvents(started.id)) events.push(e.type);
    expect(events).toEqual(["phase", "log", "phase", "done"]);
    await client.start("quickstart/alpha", { wait: true });
  });
});
