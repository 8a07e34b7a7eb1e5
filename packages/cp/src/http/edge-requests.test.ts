import { connect } from "node:net";
import { ControlPlaneMessages, ErrorResponse, MAX_TTL_SEC } from "@denv/spec";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { deployed, startTestCp, type TestCp } from "../testing/harness.js";

/**
 * What the API fuzz run (fuzz.test.ts) found, each pinned here as a plain request: every answer
 * is the error shape with a 4xx, never a 5xx or Fastify's own body.
 */

describe("requests the fuzzer found", () => {
  let t: TestCp;
  beforeAll(async () => {
    t = await startTestCp();
    await t.host({ name: "h1" });
    await deployed(t, "shop");
  });
  afterAll(() => t.close());

  it("a TTL past a year is refused with 400 (it made an invalid date: 500)", async () => {
    for (const [path, body] of [
      ["/v1/targets/local/join-tokens", { ttl_sec: 1240061957646709 }],
      ["/v1/sandboxes", { project: "shop", ttl_sec: 195696331168051 }],
      ["/v1/sandboxes", { project: "shop", ttl_sec: MAX_TTL_SEC + 1 }],
    ] as const) {
      const r = await t.admin.post(path, body);
      expect(r.status, path).toBe(400);
      expect(r.body.error.code).toBe("invalid_request");
      expect(r.body.error.message).toMatch(/^invalid request: ttl_sec: /);
    }
    expect((await t.admin.post("/v1/targets/local/join-tokens", { ttl_sec: MAX_TTL_SEC })).status).toBe(201);
  });

  it("a path parameter over the router's limit is 414 in the error shape (was Fastify's body)", async () => {
    const r = await t.admin.get(`/v1/environments/shop/${"x".repeat(200)}/exec/stream`);
    expect(r.status).toBe(414);
    expect(ErrorResponse.parse(r.body).error.code).toBe("invalid_request");
  });

  it("a WebSocket route asked without an upgrade is 400 naming the route (was an empty 404)", async () => {
    for (const path of [
      "/v1/environments/shop/alpha/exec/stream",
      "/v1/environments/shop/alpha/connect?service=api&port=80",
    ]) {
      const r = await t.admin.get(path);
      expect(r.status, path).toBe(400);
      expect(r.body.error).toEqual({
        code: "invalid_request",
        message: ControlPlaneMessages.notAnUpgrade(
          path.includes("stream")
            ? "/v1/environments/:project/:env/exec/stream"
            : "/v1/environments/:project/:env/connect",
        ),
      });
    }
    // Authentication still comes first.
    expect((await t.anon.get("/v1/hosts/stream")).status).toBe(401);
  });

  it("a client that resets the socket after a refused upgrade leaves the server answering", async () => {
    const { hostname, port } = new URL(t.url);
    for (let i = 0; i < 10; i++) {
      const answer = await new Promise<string>((resolve, reject) => {
        const s = connect(Number(port), hostname, () => {
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
      expect(answer.split("\r\n")[0]).toMatch(/^HTTP\/1\.1 401 /);
    }
    expect((await t.anon.get("/healthz")).status).toBe(200);
  });

  it("the deployment log declares its server-sent events, not a string", async () => {
    const doc = (await t.anon.get("/v1/openapi.json")).body;
    const schema =
      doc.paths["/v1/deployments/{id}/log"].get.responses["200"].content["text/event-stream"].schema;
    expect(schema).toMatchObject({ type: "object", required: expect.arrayContaining(["event", "data"]) });
  });
});
