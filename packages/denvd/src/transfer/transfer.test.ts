import { createHash, randomBytes } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import net from "node:net";
import { PassThrough, Writable } from "node:stream";
import { TransferMessages, TransferRecordType, TransferResume } from "@denv/spec";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Runtime } from "../runtime/runtime.js";
import { openTestRuntime, writeProject } from "../testing/harness.js";
import { dialDirect, TransferListener } from "./direct.js";
import { receiveVersion } from "./receive.js";
import { manifestOf, sendVersion } from "./send.js";
import { stagingDir } from "./staging.js";
import { RecordWriter } from "./wire.js";

/**
 * Version transfer between two hosts' runtimes (on this machine's one engine: the cross-engine
 * path, with layers that are not there yet, runs in packages/cli/src/e2e/hosts.test.ts). The
 * bytes go through a pipe here instead of the control plane's relay.
 */

const COMPOSE = `
services:
  main:
    image: debian:bookworm-slim
    command: ["sleep", "infinity"]
    init: true
    volumes: [data:/data]
  db:
    image: debian:bookworm-slim
    command: ["sleep", "infinity"]
    init: true
    volumes: [dbdata:/var/lib/db]
volumes:
  data: {}
  dbdata: {}
x-denv:
  agent: main
`;

type Rt = Runtime & AsyncDisposable;

/** Runs one attempt: the receiver's resume point starts the sender; `cutAfter` drops the link. */
async function attempt(
  from: Rt,
  to: Rt,
  version: string,
  opts: { cutAfter?: number } = {},
): Promise<Awaited<ReturnType<typeof receiveVersion>>> {
  const link = new PassThrough();
  let passed = 0;
  const wire = new Writable({
    write(chunk: Buffer, _enc, cb) {
      if (opts.cutAfter !== undefined && passed + chunk.length > opts.cutAfter) {
        link.destroy(new Error("the link dropped"));
        cb(new Error("the link dropped"));
        return;
      }
      passed += chunk.length;
      if (link.write(chunk)) cb();
      else link.once("drain", () => cb());
    },
    final(cb) {
      link.end();
      cb();
    },
  });
  const abort = new AbortController();
  let sending: Promise<unknown> = Promise.resolve();
  const received = receiveVersion(to.host, version, from.host.hostId, {
    inbound: link,
    sendResume: async (line) => {
      const resume = TransferResume.parse(JSON.parse(line.toString("utf8")));
      if (resume.complete) {
        link.end();
        return;
      }
      sending = sendVersion(from.host, version, resume, new RecordWriter(wire), abort.signal).then(
        () => new Promise<void>((r) => wire.end(r)),
        // As the control plane does: a sender that failed ends the receiver's stream with its error.
        (err: Error) => link.destroy(err),
      );
    },
  });
  try {
    return await received;
  } finally {
    abort.abort();
    await sending;
  }
}

const sha = (s: string) => createHash("sha256").update(s).digest("hex");

describe("version transfer", () => {
  let a: Rt;
  let b: Rt;
  const env = "xfer/alpha";
  let want: Record<string, string>;

  beforeAll(async () => {
    a = await openTestRuntime();
    b = await openTestRuntime();
    await a.deploy({ project: "xfer", projectDir: await writeProject({ "compose.yaml": COMPOSE }) });
    // A committed file, a 6 MiB volume file (several chunks), a tree with a symlink, an owned root.
    await a.exec(env, { shell: "echo layer-content > /workspace/layer.txt" });
    await a.exec(env, {
      service: "db",
      user: "0",
      shell:
        "head -c 6291456 /dev/urandom > /var/lib/db/blob && mkdir -p /var/lib/db/t/u && echo x > /var/lib/db/t/u/f && ln -s /etc/passwd /var/lib/db/t/link && chown 999:999 /var/lib/db && chmod 0750 /var/lib/db",
    });
    await a.snapshot(env);
    want = await digests(a, env);
  });
  afterAll(async () => {
    await b?.[Symbol.asyncDispose]();
    await a?.[Symbol.asyncDispose]();
  });

  async function digests(rt: Rt, id: string): Promise<Record<string, string>> {
    const out = async (service: string, shell: string) =>
      (await rt.exec(id, { service, ...(service === "main" ? {} : { user: "0" }), shell })).stdout.toString();
    return {
      layer: sha(await out("main", "cat /workspace/layer.txt")),
      volume: sha(
        await out(
          "db",
          "cd /var/lib/db && find . -printf '%p %y %m %U %G %s %l\\n' | sort && sha256sum blob t/u/f",
        ),
      ),
      root: await out("db", "stat -c '%u:%g %a' /var/lib/db"),
    };
  }

  it("a dropped link leaves nothing registered, and the next attempt resumes from what was verified", async () => {
    await expect(attempt(a, b, "xfer@v1", { cutAfter: 3 * 1024 * 1024 })).rejects.toThrow(/link dropped/);
    expect(await b.host.records.getVersion("xfer@v1")).toBeUndefined();
    expect(existsSync(`${stagingDir(b.host, "xfer@v1")}/journal.json`)).toBe(true);

    const r = await attempt(a, b, "xfer@v1");
    expect(r.transfer.resumed_bytes).toBeGreaterThan(0);
    expect(r.record.receivedFrom).toBe(a.host.hostId);
    // Staging is gone once the version is registered.
    expect(existsSync(stagingDir(b.host, "xfer@v1"))).toBe(false);

    const fork = await b.fork("xfer@v1", { name: "f1" });
    expect(await digests(b, fork.id)).toEqual(want);
    expect(want.root).toBe("999:999 750\n");
  });

  it("a second transfer of a version the host has sends nothing", async () => {
    const r = await attempt(a, b, "xfer@v1");
    expect(r.transfer.bytes).toBe(0);
  });

  it("the layers the receiving engine has are not sent", async () => {
    const m = await manifestOf(a.host, (await a.host.records.getVersion("xfer@v1")) as never);
    expect(m.parts.map((p) => p.name)).toEqual(["volume:data", "volume:dbdata", "image:db", "image:main"]);
    await b.destroy("xfer/f1");
    await b.deleteVersion("xfer@v1");
    const r = await attempt(a, b, "xfer@v1");
    // Same engine: every layer is there already.
    expect(r.transfer.layers_sent).toBe(0);
    expect(r.transfer.layers_skipped).toBeGreaterThan(0);
  });

  it("a link dropped inside an image part resumes there: the archive's entries come in the same order", async () => {
    await b.deleteVersion("xfer@v1");
    const whole = (await attempt(a, b, "xfer@v1")).transfer.bytes;
    await b.deleteVersion("xfer@v1");
    // The last part is an image's: a cut this close to the end falls inside its entries.
    await expect(attempt(a, b, "xfer@v1", { cutAfter: whole - 1500 })).rejects.toThrow(/link dropped/);
    const r = await attempt(a, b, "xfer@v1");
    expect(r.transfer.resumed_parts).toEqual(expect.arrayContaining(["volume:data", "volume:dbdata"]));
    // What was kept plus what came again: a resume re-sends no more than its part's records.
    expect(r.transfer.bytes - whole).toBeLessThan(16 * 1024);
    const fork = await b.fork("xfer@v1", { name: "f2" });
    expect(await digests(b, fork.id)).toEqual(want);
  });
});

/** One line written to the receiver's transfer listener, and its one-line answer. */
async function knock(address: string, line: string): Promise<string> {
  const [host, port] = [
    address.slice(0, address.lastIndexOf(":")),
    Number(address.slice(address.lastIndexOf(":") + 1)),
  ];
  const s = net.connect({ host, port });
  s.write(`${line}\n`);
  let text = "";
  for await (const c of s) text += (c as Buffer).toString("utf8");
  return text;
}

const ticket = () => randomBytes(32).toString("base64url");

describe("the direct path: a receiver's transfer listener", () => {
  let a: Rt;
  let b: Rt;
  let listener: TransferListener;
  const refusals: string[] = [];

  beforeAll(async () => {
    a = await openTestRuntime();
    b = await openTestRuntime();
    await a.deploy({ project: "direct", projectDir: await writeProject({ "compose.yaml": COMPOSE }) });
    await a.exec("direct/alpha", {
      service: "db",
      user: "0",
      shell:
        "head -c 3000000 /dev/urandom > /var/lib/db/blob && mkdir -p /var/lib/db/t && echo y > /var/lib/db/t/f",
    });
    await a.snapshot("direct/alpha");
    listener = await TransferListener.open({ host: "127.0.0.1", port: 0 }, (_m, f) =>
      refusals.push(String(f?.why ?? "")),
    );
  });
  afterAll(async () => {
    await listener?.close();
    await b?.[Symbol.asyncDispose]();
    await a?.[Symbol.asyncDispose]();
  });

  /** A receive of `version` that takes its records from the connection presenting `t`. */
  function receiveDirect(version: string, t: string, onResume: (r: TransferResume) => void) {
    const waiting = listener.expect({
      ticket: t,
      version,
      from: a.host.hostId,
      expiresAt: Date.now() + 60_000,
    });
    const result = receiveVersion(b.host, version, a.host.hostId, {
      inbound: (async function* () {
        yield* (await waiting.socket) as AsyncIterable<Buffer>;
      })(),
      sendResume: async (line) => onResume(TransferResume.parse(JSON.parse(line.toString("utf8")))),
    });
    result.catch(() => undefined);
    return { result, cancel: () => waiting.cancel("test over") };
  }

  const refused = (why: string) => `${JSON.stringify({ error: TransferMessages.directRefused(why) })}\n`;

  it("refuses no ticket, a wrong ticket and a line that is not a hello, one line each; the real sender then moves the version", {
    timeout: 120_000,
  }, async () => {
    const t = ticket();
    let resumed!: (r: TransferResume) => void;
    const resume = new Promise<TransferResume>((r) => {
      resumed = r;
    });
    const r = receiveDirect("direct@v1", t, (x) => resumed(x));
    const hello = (more: Record<string, unknown>) =>
      JSON.stringify({ version: "direct@v1", from: a.host.hostId, ...more });
    expect(await knock(listener.address, hello({}))).toBe(refused(TransferMessages.directNoTicket));
    expect(await knock(listener.address, hello({ ticket: ticket() }))).toBe(
      refused(TransferMessages.directWrongTicket),
    );
    expect(await knock(listener.address, "GET / HTTP/1.1")).toBe(
      refused("the first line is not a transfer hello"),
    );
    expect(refusals).toHaveLength(3);
    // Nothing was registered, and the receive still waits for the ticket's holder.
    expect(await b.host.records.getVersion("direct@v1")).toBeUndefined();

    const socket = await dialDirect(
      { address: listener.address, ticket: t, to: b.host.hostId },
      { version: "direct@v1", from: a.host.hostId },
      new AbortController().signal,
    );
    await sendVersion(
      a.host,
      "direct@v1",
      await resume,
      new RecordWriter(socket),
      new AbortController().signal,
    );
    await new Promise<void>((done) => socket.end(done));
    const got = await r.result;
    expect(got.record.receivedFrom).toBe(a.host.hostId);
    const fork = await b.fork("direct@v1", { name: "f" });
    expect(await digests(b, fork.id)).toEqual(await digests(a, "direct/alpha"));
    await b.destroy(fork.id);

    // The ticket was spent: presented again, it is refused, whoever presents it.
    await expect(
      dialDirect(
        { address: listener.address, ticket: t, to: b.host.hostId },
        { version: "direct@v1", from: a.host.hostId },
        new AbortController().signal,
      ),
    ).rejects.toThrow(TransferMessages.directRefused(TransferMessages.directUsedTicket));
  });

  it("a ticket presented for another version (or by another sender) is spent and fails the receive; nothing is registered", async () => {
    await b.deleteVersion("direct@v1");
    const t = ticket();
    const r = receiveDirect("direct@v1", t, () => undefined);
    const why = TransferMessages.directOtherVersion("direct@v1", a.host.hostId);
    expect(
      await knock(listener.address, JSON.stringify({ ticket: t, version: "direct@v9", from: a.host.hostId })),
    ).toBe(refused(why));
    await expect(r.result).rejects.toThrow(TransferMessages.directRefused(why));
    expect(await b.host.records.getVersion("direct@v1")).toBeUndefined();
    // Spent: the right version with it is refused too.
    expect(
      await knock(listener.address, JSON.stringify({ ticket: t, version: "direct@v1", from: a.host.hostId })),
    ).toBe(refused(TransferMessages.directUsedTicket));
    await b.deleteVersion("direct@v1");
  });

  it("an expired ticket is refused and the receive says its sender never came", async () => {
    const t = ticket();
    const waiting = listener.expect({
      ticket: t,
      version: "direct@v1",
      from: a.host.hostId,
      expiresAt: Date.now() + 50,
    });
    await expect(waiting.socket).rejects.toThrow(TransferMessages.directNoSender("direct@v1", a.host.hostId));
    expect(
      await knock(listener.address, JSON.stringify({ ticket: t, version: "direct@v1", from: a.host.hostId })),
    ).toBe(refused(TransferMessages.directExpiredTicket));
  });

  async function digests(rt: Rt, id: string): Promise<string> {
    return (
      await rt.exec(id, {
        service: "db",
        user: "0",
        shell: "cd /var/lib/db && find . -printf '%p %y %m %U %G %s %l\\n' | sort && sha256sum blob t/f",
      })
    ).stdout.toString();
  }
});

describe("a hostile sender", () => {
  let a: Rt;
  let b: Rt;

  beforeAll(async () => {
    a = await openTestRuntime();
    b = await openTestRuntime();
    await a.deploy({
      project: "evil",
      projectDir: await writeProject({
        "compose.yaml": `
services:
  main:
    image: debian:bookworm-slim
    command: ["sleep", "infinity"]
    init: true
    volumes: [data:/data]
volumes:
  data: {}
x-denv:
  agent: main
`,
      }),
    });
    await a.snapshot("evil/alpha");
  });
  afterAll(async () => {
    await b?.[Symbol.asyncDispose]();
    await a?.[Symbol.asyncDispose]();
  });

  /** Feeds hand-made records (after a true manifest of evil@v1) to the receiver. */
  async function feed(write: (w: RecordWriter) => Promise<void>, corrupt = false): Promise<unknown> {
    const link = new PassThrough();
    const w = new RecordWriter(link);
    const manifest = await manifestOf(a.host, (await a.host.records.getVersion("evil@v1")) as never);
    const result = receiveVersion(b.host, "evil@v1", a.host.hostId, {
      inbound: corrupt ? link.pipe(flipByte(200)) : link,
      sendResume: async () => {
        await w.json(TransferRecordType.manifest, manifest);
        await write(w);
        await w.flush();
        link.end();
      },
    });
    return result.catch((err: Error) => err);
  }

  const entry = (path: string, more: Record<string, unknown>) => ({
    path,
    mode: 0o644,
    uid: 0,
    gid: 0,
    mtime_ms: 0,
    ...more,
  });

  it("refuses a file written through a symlink it sent, and writes nothing outside the volume", async () => {
    const before = readFileSync("/etc/hostname", "utf8");
    const err = await feed(async (w) => {
      await w.json(TransferRecordType.part, {
        name: "volume:data",
        root: { mode: 0o755, uid: 0, gid: 0, mtime_ms: 0 },
      });
      await w.json(TransferRecordType.entry, entry("escape", { type: "symlink", target: "/etc" }));
      await w.json(TransferRecordType.entry, entry("escape/hostname", { type: "file", size: 5 }));
      await w.data(Buffer.from("owned"));
    });
    expect(String(err)).toContain(
      "version transfer: refused entry 'escape/hostname': its parent is not a directory of this transfer",
    );
    expect(readFileSync("/etc/hostname", "utf8")).toBe(before);
    expect(await b.host.records.getVersion("evil@v1")).toBeUndefined();
  });

  it("refuses .. and absolute paths", async () => {
    for (const path of ["../../../../tmp/x", "/tmp/x", "a/../../x"]) {
      const err = await feed(async (w) => {
        await w.json(TransferRecordType.part, {
          name: "volume:data",
          root: { mode: 0o755, uid: 0, gid: 0, mtime_ms: 0 },
        });
        await w.json(TransferRecordType.entry, entry(path, { type: "file", size: 0 }));
      });
      expect(String(err)).toContain(`version transfer: refused entry path '${path}'`);
    }
  });

  it("refuses a corrupted chunk", async () => {
    const err = await feed(async (w) => {
      await w.json(TransferRecordType.part, {
        name: "volume:data",
        root: { mode: 0o755, uid: 0, gid: 0, mtime_ms: 0 },
      });
      await w.json(TransferRecordType.entry, entry("f", { type: "file", size: 4096 }));
      await w.data(Buffer.alloc(4096, 7));
    }, true);
    expect(String(err)).toMatch(/checksum mismatch \(the chunk was corrupted on the way\)/);
    expect(await b.host.records.getVersion("evil@v1")).toBeUndefined();
  });

  it("an abandoned transfer is removed by deleting the version", async () => {
    expect(existsSync(stagingDir(b.host, "evil@v1"))).toBe(true);
    await b.deleteVersion("evil@v1");
    expect(existsSync(stagingDir(b.host, "evil@v1"))).toBe(false);
    expect((await b.host.store.liveIds()).filter((id) => id.startsWith("xfer-"))).toEqual([]);
  });
});

/** A stream that flips one byte at `at` (a corrupted link). */
function flipByte(at: number): PassThrough {
  let seen = 0;
  const t = new PassThrough({
    transform(chunk: Buffer, _enc, cb) {
      const c = Buffer.from(chunk);
      if (seen <= at && at < seen + c.length) c[at - seen] = (c[at - seen] ?? 0) ^ 0xff;
      seen += c.length;
      cb(null, c);
    },
  });
  return t;
}
