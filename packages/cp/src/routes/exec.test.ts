import { INITIAL_WINDOW, MAX_EXEC_TIMEOUT_SEC, Protection } from "@denv/spec";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import WebSocket from "ws";
import type { FakeHost } from "../testing/fake-host.js";
import { deployed, startTestCp, type TestCp, waitFor } from "../testing/harness.js";

interface ServerFrame {
  type: string;
  data?: string;
  result?: Record<string, unknown>;
  error?: { code: string; message: string };
}

function openExec(t: TestCp, path = "/v1/environments/shop/alpha/exec/stream") {
  const ws = new WebSocket(`${t.url.replace(/^http/, "ws")}${path}`, {
    headers: { authorization: `Bearer ${t.cp.adminToken}` },
  });
  const frames: ServerFrame[] = [];
  const out = { stdout: 0, stderr: Buffer.alloc(0), chunks: [] as Buffer[] };
  ws.on("message", (m) => {
    const f = JSON.parse(m.toString()) as ServerFrame;
    if (f.type === "stdout") {
      const b = Buffer.from(f.data ?? "", "base64");
      out.stdout += b.length;
      if (out.chunks.length < 1000) out.chunks.push(b);
    } else if (f.type === "stderr")
      out.stderr = Buffer.concat([out.stderr, Buffer.from(f.data ?? "", "base64")]);
    else frames.push(f);
  });
  const closed = new Promise<number>((r) => ws.on("close", (code) => r(code)));
  const opened = new Promise<void>((r, j) => {
    ws.once("open", () => r());
    ws.once("error", j);
  });
  const send = (f: unknown) => ws.send(JSON.stringify(f));
  return { ws, frames, out, closed, opened, send };
}

describe("exec", () => {
  let t: TestCp;
  let h: FakeHost;
  beforeAll(async () => {
    t = await startTestCp();
    h = await t.host({ name: "h1" });
    await deployed(t, "shop");
  });
  afterAll(() => t.close());

  it("runs a command and answers its result (JSON, output as UTF-8)", async () => {
    const r = await t.admin.post("/v1/environments/shop/alpha/exec", { cmd: ["echo", "hello", "world"] });
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({
      exit_code: 0,
      stdout: "hello world\n",
      stderr: "",
      encoding: "utf8",
      timed_out: false,
    });
    const cat = await t.admin.post("/v1/environments/shop/alpha/exec", {
      cmd: ["cat"],
      stdin: Buffer.from("from stdin").toString("base64"),
    });
    expect(cat.body.stdout).toBe("from stdin");
    expect((await t.admin.post("/v1/environments/shop/alpha/exec", { cmd: ["false"] })).body.exit_code).toBe(
      1,
    );
    const cmd = h.commands.filter((c) => c.kind === "env.exec").at(-1);
    expect(cmd?.payload.environment).toMatch(/^shop\/alpha-[a-z0-9]{6}$/);
  });

  it("refuses an exec request that is not the exec contract", async () => {
    const both = await t.admin.post("/v1/environments/shop/alpha/exec", { cmd: ["ls"], shell: "ls" });
    expect(both.status).toBe(400);
    expect(both.body.error.message).toContain("give exactly one of 'cmd' (argv) and 'shell'");
    expect((await t.admin.post("/v1/environments/shop/nope/exec", { cmd: ["ls"] })).status).toBe(404);
    // A timeout no timer can wait (the fuzzer's 1.8e307 s made a deadline of Infinity: an
    // instant 504, and a frame the host could not read) is refused, and nothing reaches the host.
    const sent = h.commands.length;
    const huge = await t.admin.post("/v1/environments/shop/alpha/exec", { cmd: ["ls"], timeout: 1.8e307 });
    expect(huge.status).toBe(400);
    expect(huge.body.error.message).toMatch(/^invalid request: timeout: /);
    expect(huge.body.error.message).toContain(String(MAX_EXEC_TIMEOUT_SEC));
    const week = await t.admin.post("/v1/environments/shop/alpha/exec", {
      cmd: ["ls"],
      timeout: MAX_EXEC_TIMEOUT_SEC + 1,
    });
    expect(week.status).toBe(400);
    expect(h.commands.length).toBe(sent);
    // A fractional timeout goes out as a whole-millisecond deadline (denvd drops a frame whose
    // deadline is not an integer, and the exec would wait for an answer that never comes).
    const odd = await t.admin.post("/v1/environments/shop/alpha/exec", {
      cmd: ["ls"],
      timeout: 61470.550062925184,
    });
    expect(odd.status).toBe(200);
    expect(Number.isInteger(h.commands.at(-1)?.deadline)).toBe(true);
    expect(h.droppedFrames).toEqual([]);
  });

  it("streams stdin in and output out over a WebSocket, within the host's credit", async () => {
    const s = openExec(t);
    await s.opened;
    s.send({ type: "start", exec: { cmd: ["cat"] } });
    const input = Buffer.alloc(2 * 1024 * 1024);
    for (let i = 0; i < input.length; i++) input[i] = i % 251;
    for (let off = 0; off < input.length; off += 100_000) {
      s.send({ type: "stdin", data: input.subarray(off, off + 100_000).toString("base64") });
    }
    s.send({ type: "stdin_end" });
    expect(await s.closed).toBe(1000);
    expect(s.out.stdout).toBe(input.length);
    expect(Buffer.concat(s.out.chunks).equals(input)).toBe(true);
    expect(s.out.stderr.toString()).toBe("done\n");
    const exit = s.frames.at(-1);
    expect(exit?.type).toBe("exit");
    expect(exit?.result).toMatchObject({ exit_code: 0, stdout: "", stderr: "" });
    // The cp wrote stdin within the credit the host granted.
    const reader = [...h.readers.values()].at(-1);
    expect(reader?.overrun).toBe(0);
    expect(reader?.bytes).toBe(input.length);
  });

  it("a slow client slows the host: output waits in no buffer larger than a window", async () => {
    const total = 48 * 1024 * 1024;
    const s = openExec(t);
    await s.opened;
    s.ws.pause();
    s.send({ type: "start", exec: { cmd: ["produce", String(total)] } });
    const writer = await h.until(() =>
      [...h.writers.values()].find((w) => w.sent > 0 && !w.closed && w.id.includes(".s")),
    );
    // Let the pipes fill: the host must stall well short of the total.
    let last = -1;
    await waitFor(async () => {
      await new Promise((r) => setTimeout(r, 150));
      const stalled = writer.sent === last;
      last = writer.sent;
      return stalled;
    });
    expect(writer.sent).toBeLessThan(total / 2);
    expect(writer.maxCredit).toBeLessThanOrEqual(INITIAL_WINDOW);
    s.ws.resume();
    expect(await s.closed).toBe(1000);
    expect(s.out.stdout).toBe(total);
    expect(s.frames.at(-1)?.type).toBe("exit");
    expect(writer.maxCredit).toBeLessThanOrEqual(INITIAL_WINDOW);
  });

  it("the host's refusals keep their code and exact message, in JSON and on the stream", async () => {
    const sync = await t.admin.post("/v1/environments/shop/alpha/exec", { cmd: ["id"], user: "root" });
    expect(sync.status).toBe(403);
    expect(sync.body.error).toEqual({ code: "agent_root", message: Protection.agentRoot("api") });
    const s = openExec(t);
    await s.opened;
    s.send({ type: "start", exec: { cmd: ["id"], user: "root" } });
    expect(await s.closed).toBe(1011);
    expect(s.frames[0]).toEqual({
      type: "error",
      error: { code: "agent_root", message: Protection.agentRoot("api") },
    });
  });

  it("a bad first frame gets an error frame and the socket closes", async () => {
    const s = openExec(t);
    await s.opened;
    s.send({ type: "stdin", data: "" });
    expect(await s.closed).toBe(1011);
    expect(s.frames[0]).toMatchObject({ type: "error", error: { code: "invalid_request" } });
  });

  it("authorizes before the upgrade", async () => {
    const ws = new WebSocket(`${t.url.replace(/^http/, "ws")}/v1/environments/shop/alpha/exec/stream`);
    const status = await new Promise<number>((r) =>
      ws.once("unexpected-response", (_q, res) => r(res.statusCode ?? 0)),
    );
    expect(status).toBe(401);
  });
});
