import { connect } from "node:net";
import { afterEach, expect, it } from "vitest";
import { FakeCp } from "./fake-cp.js";

let cp: FakeCp | undefined;
afterEach(async () => {
  await cp?.close();
  cp = undefined;
});

// A client that has read the 401 may reset the socket (CI saw it once): the fake must not
// throw an uncaught ECONNRESET into whichever test runs next.
it("survives clients that reset the socket after reading a refused upgrade", async () => {
  cp = await FakeCp.start();
  const port = Number(new URL(cp.url).port);
  for (let i = 0; i < 10; i++) {
    const answer = await new Promise<string>((resolve, reject) => {
      const s = connect(port, "127.0.0.1", () => {
        s.write(
          "GET /v1/hosts/stream HTTP/1.1\r\nhost: cp\r\nconnection: upgrade\r\nupgrade: websocket\r\n" +
            "sec-websocket-version: 13\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
        );
      });
      s.once("error", reject);
      s.once("data", (d) => {
        s.resetAndDestroy();
        resolve(d.toString());
      });
    });
    expect(answer.split("\r\n")[0]).toBe("HTTP/1.1 401 Unauthorized");
  }
  await new Promise((r) => setTimeout(r, 100));
  expect(cp.refused).toBe(10);
});
