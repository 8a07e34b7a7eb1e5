import { createHash } from "node:crypto";
import { request } from "node:http";
import { Readable } from "node:stream";
import { INITIAL_WINDOW } from "@denv/spec";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import WebSocket from "ws";
import type { FakeHost } from "../testing/fake-host.js";
import { deployed, startTestCp, type TestCp, waitFor } from "../testing/harness.js";

const FILE_BYTES = 24 * 1024 * 1024;

/** The bytes the fake host sends for env.files.get: 64 KiB blocks filled with their index. */
function expectedFile(total: number): string {
  const h = createHash("sha256");
  for (let off = 0; off < total; off += 65536)
    h.update(Buffer.alloc(Math.min(65536, total - off), off / 65536));
  return h.digest("hex");
}

describe("files and tunnels stream through", () => {
  let t: TestCp;
  let h: FakeHost;
  beforeAll(async () => {
    t = await startTestCp();
    h = await t.host({ name: "h1", fileBytes: FILE_BYTES, grantDelayMs: 1 });
    await deployed(t, "shop");
  });
  afterAll(() => t.close());

  it("PUT streams a tar body to the host within its credit (the host reads slowly)", async () => {
    const total = 16 * 1024 * 1024;
    let produced = 0;
    const body = Readable.from(
      (function* () {
        while (produced < total) {
          produced += 256 * 1024;
          yield Buffer.alloc(256 * 1024, 3);
        }
      })(),
    );
    const res = await fetch(`${t.url}/v1/environments/shop/alpha/files?path=/work&user=1000`, {
      method: "PUT",
      headers: { authorization: `Bearer ${t.cp.adminToken}`, "content-type": "application/x-tar" },
      body: Readable.toWeb(body) as ReadableStream,
      duplex: "half",
    } as RequestInit);
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ entries: 1, bytes: total });
    const put = h.commands.filter((c) => c.kind === "env.files.put").at(-1);
    expect(put?.payload).toMatchObject({ path: "/work", user: "1000" });
    const reader = h.readers.get(put?.payload.stream as string);
    expect(reader?.overrun).toBe(0);
    expect(reader?.bytes).toBe(total);
  });

  it("GET streams the host's tar to a slow client without buffering it whole", async () => {
    const writersBefore = new Set(h.writers.keys());
    const res = await new Promise<import("node:http").IncomingMessage>((resolve, reject) => {
      const req = request(`${t.url}/v1/environments/shop/alpha/files?path=/work/out`, {
        headers: { authorization: `Bearer ${t.cp.adminToken}` },
      });
      req.on("response", resolve).on("error", reject).end();
    });
    expect(res.statusCode).toBe(200);
    expect(res.headers["content-type"]).toBe("application/x-tar");
    res.pause();
    const writer = await h.until(() => [...h.writers.values()].find((w) => !writersBefore.has(w.id)));
    let last = -1;
    await waitFor(async () => {
      await new Promise((r) => setTimeout(r, 150));
      const stalled = writer.sent === last;
      last = writer.sent;
      return stalled;
    });
    expect(writer.sent).toBeLessThan(FILE_BYTES);
    expect(writer.maxCredit).toBeLessThanOrEqual(INITIAL_WINDOW);
    const hash = createHash("sha256");
    let bytes = 0;
    res.on("data", (c: Buffer) => {
      bytes += c.length;
      hash.update(c);
    });
    res.resume();
    await new Promise((r) => res.on("end", r));
    expect(bytes).toBe(FILE_BYTES);
    expect(hash.digest("hex")).toBe(expectedFile(FILE_BYTES));
  });

  it("a path the host refuses is an HTTP error, not a broken download", async () => {
    const r = await t.admin.get("/v1/environments/shop/alpha/files?path=/missing");
    expect(r.status).toBe(404);
    expect(r.body.error.code).toBe("not_found");
    expect((await t.admin.get("/v1/environments/shop/alpha/files")).status).toBe(400);
  });

  it("connect: binary frames carry a TCP byte stream both ways", async () => {
    const ws = new WebSocket(
      `${t.url.replace(/^http/, "ws")}/v1/environments/shop/alpha/connect?service=api&port=8080`,
      {
        headers: { authorization: `Bearer ${t.cp.adminToken}` },
      },
    );
    await new Promise((r) => ws.once("open", r));
    const got: Buffer[] = [];
    ws.on("message", (m: Buffer) => got.push(Buffer.from(m)));
    const sent = Buffer.alloc(1024 * 1024, 9);
    for (let off = 0; off < sent.length; off += 50_000) ws.send(sent.subarray(off, off + 50_000));
    await waitFor(() => Buffer.concat(got).length === sent.length);
    expect(Buffer.concat(got).equals(sent)).toBe(true);
    const cmd = h.commands.filter((c) => c.kind === "env.connect").at(-1);
    expect(cmd?.payload).toMatchObject({ service: "api", port: 8080 });
    ws.close();
    await new Promise((r) => ws.once("close", r));
  });

  it("logs and the egress probe go to the environment's host", async () => {
    expect((await t.admin.get("/v1/environments/shop/alpha/logs?service=api&tail=10")).body).toEqual({
      stdout: "api listening on :8080\n",
      stderr: "",
    });
    expect(h.commands.filter((c) => c.kind === "env.logs").at(-1)?.payload).toMatchObject({
      service: "api",
      tail: 10,
    });
    expect((await t.admin.get("/v1/environments/shop/alpha/probe")).body).toMatchObject({
      ok: true,
      findings: [],
    });
  });
});
