import { Readable } from "node:stream";
import { Protection } from "@denv/spec";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DenvApiError, DenvClient } from "./index.js";
import { type FakeControlPlane, startFakeControlPlane } from "./testing/fake-control-plane.js";

let fake: FakeControlPlane;
let client: DenvClient;

beforeAll(async () => {
  fake = await startFakeControlPlane();
  client = new DenvClient({ url: fake.url, token: fake.memberToken });
});
afterAll(() => fake?.close());

describe("exec", () => {
  it("runs a command and returns its whole result", async () => {
    const result = await client.exec("quickstart/alpha", {
      cmd: ["cat"],
      stdin: Buffer.from("hello").toString("base64"),
    });
    expect(result).toMatchObject({ exit_code: 0, stdout: "hello", timed_out: false });
    const failed = await client.exec("quickstart/alpha", { shell: "fail-with 3 broken" });
    expect(failed).toMatchObject({ exit_code: 3, stderr: "broken\n" });
  });

  it("streams stdin in and stdout/stderr out over the WebSocket", async () => {
    const out: string[] = [];
    const big = "y".repeat(200_000);
    const result = await client.execStream(
      "quickstart/alpha",
      { cmd: ["cat"] },
      { stdin: Readable.from([Buffer.from("a"), Buffer.from(big)]), onStdout: (b) => out.push(b.toString()) },
    );
    expect(result.exit_code).toBe(0);
    expect(result.stdout).toBe("");
    expect(out.join("")).toBe(`a${big}`);

    const err: string[] = [];
    const failed = await client.execStream(
      "quickstart/alpha",
      { cmd: ["fail-with", "7", "oops"] },
      { onStderr: (b) => err.push(b.toString()) },
    );
    expect(failed.exit_code).toBe(7);
    expect(err.join("")).toBe("oops\n");
  });

  it("reports timeouts and commands that cannot start through the result", async () => {
    const slow = await client.execStream("quickstart/alpha", { cmd: ["sleep", "5"], timeout: 0.05 });
    expect(slow).toMatchObject({ exit_code: 124, timed_out: true });
    const missing = await client.execStream("quickstart/alpha", { cmd: ["nope"] });
    expect(missing.exit_code).toBe(127);
  });

  it("throws the refusal as DenvApiError, before and after the upgrade", async () => {
    const root = await client
      .execStream("quickstart/alpha", { cmd: ["id"], user: "root" })
      .catch((e: unknown) => e);
    expect(root).toBeInstanceOf(DenvApiError);
    expect(root).toMatchObject({ code: "agent_root", message: Protection.agentRoot("main") });
    await expect(client.execStream("quickstart/nope", { cmd: ["id"] })).rejects.toMatchObject({
      code: "not_found",
      message: "environment 'quickstart/nope' does not exist",
    });
    await expect(
      new DenvClient({ url: fake.url, token: "wrong" }).execStream("quickstart/alpha", { cmd: ["id"] }),
    ).rejects.toMatchObject({ status: 401, code: "unauthorized" });
    await expect(client.exec("quickstart/alpha", { cmd: ["id"], user: "0" })).rejects.toMatchObject({
      status: 403,
      code: "agent_root",
    });
  });

  it("stops when aborted", async () => {
    const controller = new AbortController();
    const run = client.execStream("quickstart/alpha", { cmd: ["sleep", "5"] }, { signal: controller.signal });
    setTimeout(() => controller.abort(), 50);
    await expect(run).rejects.toMatchObject({ name: "AbortError" });
  });
});
