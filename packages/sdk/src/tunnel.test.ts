import net from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DenvClient } from "./index.js";
import { type FakeControlPlane, startFakeControlPlane } from "./testing/fake-control-plane.js";

let fake: FakeControlPlane;
let client: DenvClient;

beforeAll(async () => {
  fake = await startFakeControlPlane();
  client = new DenvClient({ url: fake.url, token: fake.memberToken });
});
afterAll(() => fake?.close());

/** Sends `text` over a TCP connection and reads as many bytes back. */
function roundTrip(port: number, text: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, "127.0.0.1", () => socket.write(text));
    let got = "";
    socket.on("data", (b) => {
      got += b.toString();
      if (got.length >= text.length) {
        socket.end();
        resolve(got);
      }
    });
    socket.on("error", reject);
  });
}

describe("connect and port-forward", () => {
  it("opens a duplex byte stream to a service port", async () => {
    const tunnel = await client.connect("quickstart/alpha", "db", 5432);
    const echoed = new Promise<string>((resolve) =>
      tunnel.once("data", (b: Buffer) => resolve(b.toString())),
    );
    tunnel.write("ping");
    expect(await echoed).toBe("ping");
    tunnel.destroy();
    expect(fake.requests).toContain("WS /v1/environments/quickstart/alpha/connect?service=db&port=5432");
  });

  it("ends the stream with the server's reason when the tunnel cannot open", async () => {
    const tunnel = await client.connect("quickstart/alpha", "nope", 80);
    const err = await new Promise<Error>((resolve) => tunnel.once("error", resolve));
    expect(err.message).toBe("environment quickstart/alpha has no service 'nope'");
  });

  it("forwards each local connection through its own WebSocket", async () => {
    await using forward = await client.portForward("quickstart/alpha", "db:5432");
    expect(forward.host).toBe("127.0.0.1");
    const before = fake.requests.filter((r) => r.startsWith("WS ")).length;
    const [a, b] = await Promise.all([
      roundTrip(forward.port, "first"),
      roundTrip(forward.port, "x".repeat(100_000)),
    ]);
    expect(a).toBe("first");
    expect(b).toHaveLength(100_000);
    expect(fake.requests.filter((r) => r.startsWith("WS ")).length - before).toBe(2);
  });

  it("reports a tunnel that cannot open and closes the local connection", async () => {
    const errors: Error[] = [];
    await using forward = await client.portForward("quickstart/alpha", "ghost:1", 0, {
      onError: (e) => errors.push(e),
    });
    await new Promise<void>((resolve) => {
      const socket = net.connect(forward.port, "127.0.0.1");
      socket.on("close", () => resolve());
      socket.on("error", () => undefined);
    });
    expect(errors[0]?.message).toBe("environment quickstart/alpha has no service 'ghost'");
  });

  it("says when the local port is taken", async () => {
    await using first = await client.portForward("quickstart/alpha", "db:5432");
    await expect(client.portForward("quickstart/alpha", "db:5432", first.port)).rejects.toThrow(
      `cannot listen on 127.0.0.1:${first.port}: the port is in use; pick another local port`,
    );
  });
});
