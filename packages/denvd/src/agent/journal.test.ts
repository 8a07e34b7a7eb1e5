import { mkdtemp, readdir, readFile, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { DONE_RETENTION_MS, Journal } from "./journal.js";

describe("the command journal", () => {
  let dir = "";
  afterEach(async () => {
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("moves a command through received -> started -> done, one 0600 file per id", async () => {
    dir = await mkdtemp(join(tmpdir(), "denvd-journal-"));
    const journal = await Journal.open(join(dir, "journal"));
    const cmd = { id: "deploy/../x 1", kind: "env.deploy" as const, payload: { project: "p" }, deadline: 1 };
    let entry = await journal.received(cmd);
    expect(await journal.unfinished()).toEqual([cmd.id]);
    entry = await journal.started(entry);
    expect((await journal.get(cmd.id))?.state).toBe("started");
    await journal.done(entry, { ok: true, result: { id: "p/alpha" } });
    const got = await journal.get(cmd.id);
    expect(got).toMatchObject({ state: "done", outcome: { ok: true, result: { id: "p/alpha" } } });
    expect(got?.payload).toEqual({ project: "p" });
    expect(await journal.unfinished()).toEqual([]);
    // The id is hashed into the file name (no path tricks), and no temp file is left behind.
    const files = await readdir(join(dir, "journal"));
    expect(files).toHaveLength(1);
    expect(files[0]).toMatch(/^[0-9a-f]{32}\.json$/);
    const file = join(dir, "journal", files[0] as string);
    expect((await stat(file)).mode & 0o777).toBe(0o600);
    expect(JSON.parse(await readFile(file, "utf8")).id).toBe(cmd.id);
  });

  it("keeps no payload for exec (it may carry an agent's stdin or secrets)", async () => {
    dir = await mkdtemp(join(tmpdir(), "denvd-journal-"));
    const journal = await Journal.open(dir);
    await journal.received({ id: "e1", kind: "env.exec", payload: { exec: { shell: "x" } }, deadline: 1 });
    expect((await journal.get("e1"))?.payload).toBeUndefined();
  });

  it("prunes done entries after 24 hours and keeps the rest", async () => {
    dir = await mkdtemp(join(tmpdir(), "denvd-journal-"));
    const journal = await Journal.open(dir);
    const a = await journal.received({ id: "a", kind: "host.gc", payload: {}, deadline: 1 });
    await journal.done(a, { ok: true, result: null });
    await journal.received({ id: "b", kind: "host.gc", payload: {}, deadline: 1 });
    expect(await journal.prune(Date.now() + DONE_RETENTION_MS - 60_000)).toBe(0);
    expect(await journal.prune(Date.now() + DONE_RETENTION_MS + 60_000)).toBe(1);
    expect((await journal.all()).map((e) => e.id)).toEqual(["b"]);
  });

  it("reads a journal that does not exist yet as empty, without creating it", async () => {
    dir = await mkdtemp(join(tmpdir(), "denvd-journal-"));
    const journal = await Journal.open(join(dir, "missing"), { create: false });
    expect(await journal.all()).toEqual([]);
    expect(await readdir(dir)).toEqual([]);
  });
});
