import { createHash } from "node:crypto";
import { ControlPlaneMessages, EPISODE_LOG, ReplayMessages } from "@denv/spec";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import WebSocket from "ws";
import type { FakeHost } from "../testing/fake-host.js";
import { deployed, startTestCp, type TestCp } from "../testing/harness.js";

/**
 * Episode logs and replay through the API, with a fake host: what a step keeps (env keys, never
 * values; stdin and output digests), paging, who may read it, the verifier's absence from it,
 * a host whose answer disagrees with what the stream carried, and the replay's refusals. The
 * quickstart's real replay (same reward, a nondeterministic step found) is in the CLI's docs test.
 */

const sha = (s: string | Buffer) => createHash("sha256").update(s).digest("hex");
const b64 = (s: string) => Buffer.from(s).toString("base64");

/** A streamed exec: sends `stdin`, collects the frames until the socket closes. */
async function streamExec(t: TestCp, env: string, exec: unknown, stdin: string) {
  const ws = new WebSocket(`${t.url.replace(/^http/, "ws")}/v1/environments/${env}/exec/stream`, {
    headers: { authorization: `Bearer ${t.cp.adminToken}` },
  });
  const frames: Array<{ type: string; data?: string; error?: { message: string } }> = [];
  ws.on("message", (m) => frames.push(JSON.parse(m.toString())));
  const closed = new Promise<void>((r) => ws.on("close", () => r()));
  await new Promise<void>((r, j) => {
    ws.once("open", () => r());
    ws.once("error", j);
  });
  ws.send(JSON.stringify({ type: "start", exec }));
  ws.send(JSON.stringify({ type: "stdin", data: b64(stdin) }));
  ws.send(JSON.stringify({ type: "stdin_end" }));
  await closed;
  return frames;
}

describe("episode logs and replay", () => {
  let t: TestCp;
  let h: FakeHost;
  let other: TestCp["admin"];
  const ep = "/v1/environments/shop/ep";

  beforeAll(async () => {
    t = await startTestCp();
    h = await t.host({ name: "h1" });
    await deployed(t, "shop");
    await deployed(t, "other");
    const fork = await t.admin.post("/v1/environments/shop/alpha/fork?wait=true", { name: "ep" });
    expect(fork.body.status).toBe("succeeded");
    other = t.admin.as((await t.admin.post("/v1/tokens", { name: "other-ci", project: "other" })).body.token);
  });
  afterAll(() => t.close());

  it("keeps each exec and files put of a fork: env keys not values, digests of stdin and output", async () => {
    expect(
      (
        await t.admin.post(`${ep}/exec`, {
          cmd: ["echo", "hello"],
          env: { API_KEY: "hunter2" },
          user: "1000",
        })
      ).body.stdout,
    ).toBe("hello\n");
    await t.admin.post(`${ep}/exec`, { cmd: ["cat"], stdin: b64("from stdin") });
    await t.admin.post(`${ep}/exec`, { cmd: ["false"], cwd: "/workspace", tty: true });
    const put = await t.admin.upload("PUT", `${ep}/files?path=/workspace`, Buffer.from("a tar"));
    expect(put.status).toBe(200);
    const frames = await streamExec(t, "shop/ep", { shell: "cat" }, "streamed in");
    expect(frames.at(-1)?.type).toBe("exit");
    // alpha is no episode: its exec is in no log.
    await t.admin.post("/v1/environments/shop/alpha/exec", { cmd: ["echo", "not logged"] });

    const log = await t.admin.get(`${ep}/episode`);
    expect(log.status).toBe(200);
    expect(JSON.stringify(log.body)).not.toContain("hunter2");
    expect(log.body).toMatchObject({ environment: "shop/ep", started_from: "shop@v1", total: 5, dropped: 0 });
    const [echo, cat, no, files, streamed] = log.body.steps;
    expect(echo).toMatchObject({
      seq: 1,
      kind: "exec",
      exec: { cmd: ["echo", "hello"], user: "1000", env_keys: ["API_KEY"], stdin_bytes: 0, streamed: false },
      result: { exit_code: 0, stdout_sha256: sha("hello\n"), stderr_sha256: sha(""), stdout_bytes: 6 },
    });
    expect(echo.token).toMatch(/^tok_/);
    expect(cat.exec).toMatchObject({ stdin_sha256: sha("from stdin"), stdin_bytes: 10, stdin_kept: true });
    expect(cat.result.stdout_sha256).toBe(sha("from stdin"));
    expect(no).toMatchObject({ exec: { cwd: "/workspace", tty: true }, result: { exit_code: 1 } });
    expect(files).toMatchObject({
      kind: "files.put",
      files: { path: "/workspace", sha256: sha("a tar"), bytes: 5, kept: true },
    });
    expect(streamed).toMatchObject({
      exec: { shell: "cat", streamed: true, stdin_sha256: sha("streamed in"), stdin_bytes: 11 },
      result: { exit_code: 0, stdout_sha256: sha("streamed in"), stderr_sha256: sha("done\n") },
    });
    expect((await t.admin.get("/v1/environments/shop/alpha/episode")).body).toMatchObject({
      total: 0,
      steps: [],
    });
  });

  it("pages by seq", async () => {
    const first = await t.admin.get(`${ep}/episode?limit=2`);
    expect(first.body.steps.map((s: { seq: number }) => s.seq)).toEqual([1, 2]);
    expect(first.body.next).toBe(2);
    const second = await t.admin.get(`${ep}/episode?after=${first.body.next}&limit=2`);
    expect(second.body.steps.map((s: { seq: number }) => s.seq)).toEqual([3, 4]);
    const last = await t.admin.get(`${ep}/episode?after=4`);
    expect(last.body.steps.map((s: { seq: number }) => s.seq)).toEqual([5]);
    expect(last.body.next).toBeUndefined();
    const tooMany = await t.admin.get(`${ep}/episode?limit=${EPISODE_LOG.page.max + 1}`);
    expect(tooMany.status).toBe(400);
  });

  it("the verifier's commands are not part of the agent's episode log", async () => {
    const before = (await t.admin.get(`${ep}/episode`)).body.total;
    const v = await t.admin.post(`${ep}/verify?wait=true`);
    expect(v.body.status).toBe("succeeded");
    expect((await t.admin.get(`${ep}/episode`)).body.total).toBe(before);
  });

  it("refuses, in one line each: an unknown environment, another project's token, a missing env value", async () => {
    const unknown = await t.admin.post("/v1/environments/shop/nope/replay", {});
    expect(unknown.status).toBe(404);
    expect(unknown.body.error.message).toBe("environment shop/nope not found");
    for (const r of [await other.get(`${ep}/episode`), await other.post(`${ep}/replay`, {})]) {
      expect(r.status).toBe(404);
      expect(r.body.error.message).toBe("environment shop/ep not found");
    }
    const before = (await t.admin.get("/v1/projects/shop/environments")).body.environments.length;
    const missing = await t.admin.post(`${ep}/replay`, {});
    expect(missing.status).toBe(400);
    expect(missing.body.error.message).toBe(ReplayMessages.missingEnv(1, ["API_KEY"]));
    const noVersion = await t.admin.post("/v1/environments/shop/alpha/replay", {});
    expect(noVersion.body.error.message).toBe(ReplayMessages.empty("shop/alpha"));
    // Nothing was forked by a refused replay.
    expect((await t.admin.get("/v1/projects/shop/environments")).body.environments.length).toBe(before);
  });

  it("replays the log on a fresh fork of the version it started from: every step the same", async () => {
    const r = await t.admin.post(`${ep}/replay`, { name: "ep-replay", env: { API_KEY: "other value" } });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body).toMatchObject({
      environment: "shop/ep",
      version: "shop@v1",
      fork: "shop/ep-replay",
      diverged: 0,
    });
    expect(r.body.diverged_at).toBeUndefined();
    expect(r.body.steps.map((s: { status: string }) => s.status)).toEqual([
      "same",
      "same",
      "same",
      "same",
      "same",
    ]);
    // The replayed fork is an episode too, with its own log of the same steps.
    const log = (await t.admin.get("/v1/environments/shop/ep-replay/episode")).body;
    expect(log.started_from).toBe("shop@v1");
    expect(log.steps.map((s: { kind: string }) => s.kind)).toEqual([
      "exec",
      "exec",
      "exec",
      "files.put",
      "exec",
    ]);
    expect(log.steps[1].exec.stdin_sha256).toBe(sha("from stdin"));
    // What the host was sent again: the kept stdin, the env value given now.
    const sent = h.commands.filter(
      (c) => c.kind === "env.exec" && String(c.payload.environment).startsWith("shop/ep-replay"),
    );
    expect(sent.map((c) => (c.payload.exec as { stdin?: string }).stdin)).toContain(b64("from stdin"));
    expect((sent[0]?.payload.exec as { env?: unknown } | undefined)?.env).toEqual({ API_KEY: "other value" });
    expect((sent[2]?.payload.exec as { tty?: boolean } | undefined)?.tty).toBe(true);
  });

  it("a step whose output differs is reported at its seq", async () => {
    const fork = await t.admin.post("/v1/environments/shop/alpha/fork?wait=true", { name: "nd" });
    expect(fork.body.status).toBe("succeeded");
    await t.admin.post("/v1/environments/shop/nd/exec", { cmd: ["echo", "one"] });
    await t.admin.post("/v1/environments/shop/nd/exec", { cmd: ["echo", "two"] });
    // The replay's host answers the second step otherwise (as a clock or /dev/urandom would).
    let n = 0;
    h.rogue.set("env.exec", (result) =>
      ++n === 2 ? { ...(result as object), stdout: "changed\n" } : result,
    );
    const r = await t.admin.post("/v1/environments/shop/nd/replay", {});
    h.rogue.delete("env.exec");
    expect(r.body).toMatchObject({ diverged: 1, diverged_at: 2 });
    expect(r.body.steps[1]).toMatchObject({ status: "diverged", differs: ["stdout"] });
    expect(r.body.steps[0].status).toBe("same");
  });

  it("a host whose exec answer disagrees with the request or the stream is not believed (attack)", async () => {
    h.rogue.set("env.exec", (result) => ({ ...(result as object), stdout: "x".repeat(100) }));
    const big = await t.admin.post(`${ep}/exec`, { cmd: ["echo", "hi"], output_limit: 10 });
    h.rogue.delete("env.exec");
    expect(big.status).toBe(500);
    const why = "its stdout is 100 bytes, over the output_limit of 10";
    expect(big.body.error.message).toBe(ControlPlaneMessages.wrongAnswer(h.id, "env.exec", why));

    const streamed = { stdin_bytes: 3, stdout_bytes: 999, stderr_bytes: 5, max_buffered_bytes: 0 };
    h.rogue.set("env.exec", (result) => ({ ...(result as object), streamed }));
    const frames = await streamExec(t, "shop/ep", { shell: "cat" }, "abc");
    h.rogue.delete("env.exec");
    const lie = ControlPlaneMessages.wrongAnswer(
      h.id,
      "env.exec",
      "it says 999 stdout bytes, the stream carried 3",
    );
    expect(frames.at(-1)).toMatchObject({ type: "error", error: { message: lie } });
    const steps = (await t.admin.get(`${ep}/episode`)).body.steps;
    expect(steps.at(-2)).toMatchObject({
      error: { message: ControlPlaneMessages.wrongAnswer(h.id, "env.exec", why) },
    });
    expect(steps.at(-1)).toMatchObject({ error: { message: lie } });
    expect(steps.at(-1).result).toBeUndefined();
  });

  it("keeps at most EPISODE_LOG.maxSteps steps, counts the rest, and refuses to replay such a log", async () => {
    await t.admin.post("/v1/environments/shop/alpha/fork?wait=true", { name: "long" });
    const path = "/v1/environments/shop/long/exec";
    for (let i = 0; i < EPISODE_LOG.maxSteps + 2; i += 50) {
      await Promise.all(
        Array.from({ length: Math.min(50, EPISODE_LOG.maxSteps + 2 - i) }, () =>
          t.admin.post(path, { cmd: ["echo", "x"] }),
        ),
      );
    }
    const log = (await t.admin.get("/v1/environments/shop/long/episode?after=998")).body;
    expect(log).toMatchObject({ total: EPISODE_LOG.maxSteps, dropped: 2 });
    expect(log.steps.map((s: { seq: number }) => s.seq)).toEqual([999, 1000]);
    const r = await t.admin.post("/v1/environments/shop/long/replay", {});
    expect(r.status).toBe(400);
    expect(r.body.error.message).toBe(ReplayMessages.tooLong("shop/long", EPISODE_LOG.maxSteps, 2));
  }, 60_000);

  it("keeps each replay: listed with its statuses, to the environment's readers only, through a restart, gone with the episode", async () => {
    const nd = (await t.admin.get("/v1/environments/shop/nd/replays")).body.replays;
    const tokens = (await t.admin.get("/v1/tokens")).body.tokens as Array<{ id: string; name: string }>;
    expect(nd).toHaveLength(1);
    expect(nd[0]).toMatchObject({
      environment: "shop/nd",
      environment_name: "nd",
      version: "shop@v1",
      token_id: tokens.find((k) => k.name === "admin")?.id,
      diverged: 1,
      diverged_at: 2,
      steps: [
        { seq: 1, kind: "exec", status: "same", differs: [] },
        { seq: 2, kind: "exec", status: "diverged", differs: ["stdout"] },
      ],
    });
    expect(nd[0].id).toMatch(/^rpl_/);
    expect(nd[0].fork).toMatch(/^shop\/replay-/);
    expect(Number.isNaN(Date.parse(nd[0].created_at))).toBe(false);
    // No output bytes are kept with a replay, only each step's status.
    expect(Object.keys(nd[0].steps[1]).sort()).toEqual(["differs", "kind", "seq", "status"]);
    const ep1 = (await t.admin.get(`${ep}/replays`)).body.replays;
    expect(ep1.map((r: { fork: string; diverged: number }) => [r.fork, r.diverged])).toEqual([
      ["shop/ep-replay", 0],
    ]);
    // A scoped token of the environment's project reads them; another project's token gets the 404.
    const shop = t.admin.as(
      (await t.admin.post("/v1/tokens", { name: "shop-ci", project: "shop" })).body.token,
    );
    const mine = await shop.get("/v1/environments/shop/nd/replays");
    expect(mine.status).toBe(200);
    expect(mine.body.replays[0].id).toBe(nd[0].id);
    const theirs = await other.get("/v1/environments/shop/nd/replays");
    expect(theirs.status).toBe(404);
    expect(theirs.body.error.message).toBe("environment shop/nd not found");
    // Destroying the episode removes its replays: a new environment of the same name has none.
    expect((await t.admin.del("/v1/environments/shop/nd?wait=true")).body.status).toBe("succeeded");
    expect((await t.admin.get("/v1/environments/shop/nd/replays")).status).toBe(404);
    const again = await t.admin.post("/v1/environments/shop/alpha/fork?wait=true", { name: "nd" });
    expect(again.body.status).toBe("succeeded");
    expect((await t.admin.get("/v1/environments/shop/nd/replays")).body).toEqual({ replays: [] });
    // A restarted cp keeps the others.
    await t.restart();
    expect((await t.admin.get(`${ep}/replays`)).body.replays).toEqual(ep1);
  }, 30_000);
});
